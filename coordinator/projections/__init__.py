"""Projections: durable consumers of what calls change (see cursor.py)."""

from coordinator.projections.analytics import AnalyticsProjection
from coordinator.projections.cursor import (
    Attachment,
    CallbackProjection,
    Projection,
    SqliteCursors,
)

__all__ = [
    "AnalyticsProjection",
    "Attachment",
    "CallbackProjection",
    "Projection",
    "SqliteCursors",
]
