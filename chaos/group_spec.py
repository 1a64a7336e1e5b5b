"""A scenario's multi-node group (``target.group``): its worker ranks and how it restarts.

Kept apart from :mod:`chaos.scenario` so that the group's container
(:mod:`chaos.group`) and the scenario schema can both name it without a cycle.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: LeaderWorkerSet's ``restartPolicy`` values that the harness models: the whole group
#: recreated when one of its containers restarts, or the pod restarted alone (``None``)
RestartPolicy = Literal["RecreateGroupOnPodRestart", "None"]


class GroupSpec(BaseModel):
    """The simulator as a group's leader, with ``ranks`` worker ranks in pods of their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ranks: int = Field(default=1, ge=1, le=8)
    restart_policy: RestartPolicy = "RecreateGroupOnPodRestart"
