// Known answers, properties and bad inputs of the ref cache family (being written; see issue 4).
