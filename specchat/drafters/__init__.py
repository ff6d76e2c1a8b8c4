"""Drafters: small strategy objects that propose tokens and learn from what the target produced.

A new drafter is one module here (implementing drafters.base.Drafter), one row in modes.py and one line in
drafterset.add_drafters (docs/how-it-works.md).
"""

from .base import NO_OFFER, Draft, Drafter, Offer, Outcome
from .model import DraftModelDrafter
from .ngram import NgramDrafter

__all__ = ["NO_OFFER", "Draft", "DraftModelDrafter", "Drafter", "NgramDrafter", "Offer", "Outcome"]
