"""Using a trained checkpoint: loading it, precision copies, the vocabulary shortlist, and the three products
(translator, text generator, mask filler)."""
