"""Training pieces: the loss, the paper's learning-rate schedule, and the optimiser (section 5)."""

from aiayn.training.objective import make_optimizer, noam_lr, seq2seq_loss

__all__ = ["make_optimizer", "noam_lr", "seq2seq_loss"]
