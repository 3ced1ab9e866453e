"""The review desk: static pages for people, served beside POST /chap.

The pages are plain HTML, CSS and JavaScript modules shipped in the package
(`static/`); every action they take is an ordinary CHAP call to POST /chap.
The server adds three reads the protocol has no method for (who the token
is, which workspaces exist, a workspace's snapshot) and a stream of new
audit entries (`GET /chap/events`, server-sent events fed by the
coordinator's audit listeners). Paths and rules: SPECIFICATION.md, "Review
desk".
"""

from coordinator.server.desk.events import EventHub
from coordinator.server.desk.routes import DeskTarget, desk_routes

__all__ = ["DeskTarget", "EventHub", "desk_routes"]
