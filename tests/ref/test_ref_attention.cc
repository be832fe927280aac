// Known answers, properties and bad inputs of the ref attention family (being written; see issue 4).
