"""The store against a plain in-memory model of the recall rule, on arbitrary Unicode.

The model (model.py) is the oracle later work on speed is held to: it scores every
visible memory the slow, obvious way, with its own copy of both word rules and both
ranks. The state machine (machine.py) runs every call of the store beside it.
"""

from __future__ import annotations

from machine import StoreMatchesModel

TestStoreMatchesModel = StoreMatchesModel.TestCase
