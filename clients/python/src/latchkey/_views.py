"""Read-only views of a hold's latest grant, shared by the sync and asyncio
holds."""

from __future__ import annotations

from typing import Dict, List, Optional

from ._models import Grant, LockHoldInfo, MultiGrant, NodeCount, short_holder


class SingleGrantView:
    """The members of the latest grant (renewed by every heartbeat)."""

    @property
    def grant(self) -> Grant:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.grant.name

    @property
    def holder(self) -> str:
        """The holder id: a capability (whoever knows it can renew and
        release the hold). Don't log it."""
        return self.grant.holder

    @property
    def fencing_token(self) -> int:
        """Pass it to the resource you protect; it rejects lower tokens."""
        return self.grant.fencing_token

    @property
    def hold_count(self) -> int:
        return self.grant.hold_count

    @property
    def lease_ms(self) -> int:
        return self.grant.lease_ms

    @property
    def expires_in_ms(self) -> int:
        """As of the last grant or heartbeat answer."""
        return self.grant.expires_in_ms

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.grant.heartbeat_interval_ms

    @property
    def mode(self) -> Optional[str]:
        """rwlocks: ``"read"`` or ``"write"`` (``"write"`` when it holds both)."""
        return self.grant.mode

    @property
    def read_hold_count(self) -> Optional[int]:
        return self.grant.read_hold_count

    @property
    def write_hold_count(self) -> Optional[int]:
        return self.grant.write_hold_count

    @property
    def permits(self) -> Optional[int]:
        """Semaphores: the permits this holder holds in total."""
        return self.grant.permits

    @property
    def validity_ms(self) -> Optional[int]:
        """RedLock: how long the grant is valid, as of its answer."""
        return self.grant.validity_ms

    @property
    def nodes(self) -> Optional[NodeCount]:
        """RedLock: on how many nodes it stands."""
        return self.grant.nodes

    def _describe(self) -> str:
        g = self.grant
        return f"name={g.name!r}, holder={short_holder(g.holder)!r}, fencing_token={g.fencing_token}"


class MultiGrantView:
    @property
    def grant(self) -> MultiGrant:
        raise NotImplementedError

    @property
    def holder(self) -> str:
        """The holder id: a capability. Don't log it."""
        return self.grant.holder

    @property
    def names(self) -> List[str]:
        return self.grant.names

    @property
    def locks(self) -> List[LockHoldInfo]:
        return self.grant.locks

    @property
    def fencing_tokens(self) -> Dict[str, int]:
        """Each lock's fencing token by name."""
        return self.grant.fencing_tokens

    @property
    def lease_ms(self) -> int:
        return self.grant.lease_ms

    @property
    def expires_in_ms(self) -> int:
        return self.grant.expires_in_ms

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.grant.heartbeat_interval_ms

    def _describe(self) -> str:
        g = self.grant
        return f"names={g.names!r}, holder={short_holder(g.holder)!r}, fencing_tokens={g.fencing_tokens!r}"
