"""Training: the single-model trainer, optimizers, batch order."""

from bnmem.train.trainer import TrainResult, load_finished, seeded_model, train_model

__all__ = ["TrainResult", "load_finished", "seeded_model", "train_model"]
