"""A pytest plugin tests/test_collection.py loads (-p collection_probe) in a collection of
the whole suite: at the collection's end it writes the names of the modules then
imported to the file PROBE_MODULES names. Not a test module."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any


def pytest_collection_finish(session: Any) -> None:
    pathlib.Path(os.environ["PROBE_MODULES"]).write_text(json.dumps(sorted(sys.modules)))
