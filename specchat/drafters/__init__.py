"""Drafters: small strategy objects that propose tokens and learn from how many were accepted."""

from .base import Draft, Drafter
from .model import DraftModelDrafter

__all__ = ["Draft", "DraftModelDrafter", "Drafter"]
