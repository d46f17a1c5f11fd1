"""Deprecated: the node formats moved to :mod:`zkrecipes.formats` (``Protocol`` is now
:class:`~zkrecipes.formats.NodeFormat`). This module only re-exports them, for code that imported it."""

from __future__ import annotations

import warnings

from .formats import (  # noqa: F401  (re-exported)
    CURATOR,
    DEFAULT,
    KAZOO,
    MARK,
    NAMES,
    RECIPES,
    ZKRECIPES,
    Found,
    NodeFormat,
    contender,
    get,
    identify,
    label,
    own,
    sort_any,
)

Protocol = NodeFormat  # the old name of the class

warnings.warn("zkrecipes.protocols is deprecated: use zkrecipes.formats (Protocol is now NodeFormat)",
              DeprecationWarning, stacklevel=2)
