"""The model: the paper's parts (sections 3.1-3.5) and the family built from them."""
