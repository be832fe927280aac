// Known answers, properties and bad inputs of the ref cpu family (being written; see issue 4).
