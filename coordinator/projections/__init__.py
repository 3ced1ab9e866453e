"""Projections: durable consumers of what calls change (see cursor.py), on
a SQLite file or a PostgreSQL database (sql.py)."""

from coordinator.errors import ProjectionError
from coordinator.projections.analytics import AnalyticsProjection
from coordinator.projections.cursor import Attachment, CallbackProjection, Projection

__all__ = [
    "AnalyticsProjection",
    "Attachment",
    "CallbackProjection",
    "Projection",
    "ProjectionError",
]
