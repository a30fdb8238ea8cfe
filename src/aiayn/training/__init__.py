"""Training pieces: the loss, the paper's learning-rate schedule, and the optimiser (section 5)."""

from aiayn.training.objective import (inverse_sqrt_lr, label_smoothed_cross_entropy, make_optimizer, noam_lr,
                                      shift_target)

__all__ = ["inverse_sqrt_lr", "label_smoothed_cross_entropy", "make_optimizer", "noam_lr", "shift_target"]
