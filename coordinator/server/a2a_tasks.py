"""The tasks A2A messages leave behind, kept in memory with a bound.

The A2A SDK records every `message/send` as a task in its task store, which
the server keeps so `tasks/get` and `tasks/list` can answer. Kept without a
bound, a stream of messages would hold memory without end; `BoundedTaskStore`
keeps at most `max_tasks` in all and `max_per_owner` per owner (the
authenticated principal, or one anonymous owner without authentication) and
forgets the oldest past either cap. Every CHAP call a task stood for is in the
audit log already (SPECIFICATION.md, "MCP and A2A").
"""

from __future__ import annotations

from collections import OrderedDict

from coordinator.extras import needs

with needs("a2a"):
    from a2a.server.context import ServerCallContext
    from a2a.server.owner_resolver import resolve_user_scope
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import Task

__all__ = ["MAX_TASKS", "MAX_TASKS_PER_OWNER", "BoundedTaskStore"]

MAX_TASKS = 10_000
MAX_TASKS_PER_OWNER = 1_000


class BoundedTaskStore(InMemoryTaskStore):
    """An InMemoryTaskStore that forgets its oldest tasks past a cap."""

    def __init__(self, max_tasks: int = MAX_TASKS, max_per_owner: int = MAX_TASKS_PER_OWNER) -> None:
        if max_tasks < 1 or max_per_owner < 1:
            raise ValueError("task caps must be positive")
        super().__init__(owner_resolver=resolve_user_scope)
        self.max_tasks = max_tasks
        self.max_per_owner = max_per_owner
        # (owner, task id) -> the context it was saved in, oldest first.
        self._kept: OrderedDict[tuple[str, str], ServerCallContext] = OrderedDict()
        self._owned: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._kept)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        owner = resolve_user_scope(context)
        key = (owner, task.id)
        if key not in self._kept:
            self._owned[owner] = self._owned.get(owner, 0) + 1
        self._kept[key] = context
        self._kept.move_to_end(key)
        while self._owned[owner] > self.max_per_owner:
            await self._forget(next(k for k in self._kept if k[0] == owner))
        while len(self._kept) > self.max_tasks:
            await self._forget(next(iter(self._kept)))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await super().delete(task_id, context)
        self._drop((resolve_user_scope(context), task_id))

    async def _forget(self, key: tuple[str, str]) -> None:
        await super().delete(key[1], self._kept[key])
        self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        if self._kept.pop(key, None) is None:
            return
        left = self._owned[key[0]] - 1
        if left:
            self._owned[key[0]] = left
        else:
            del self._owned[key[0]]
