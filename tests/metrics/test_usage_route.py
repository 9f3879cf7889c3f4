"""``GET jupyter-air/gpu/usage`` as an attack: a Hub user sees their own GPU-hours only,
not another user's jobs or name, even on a job shared with them; a Hub admin sees
everyone's; a bad window is refused."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from jupyter_core.utils import ensure_async
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.store import JobStore
from tests.metrics.usage_day import Day, scripted_day


@dataclass
class HubUser(User):
    hub_user: dict[str, Any] = field(default_factory=dict)


class HubHeaderIdentityProvider(IdentityProvider):
    """A token-authenticated request is the Hub user its X-Test-User header names, an
    admin with X-Test-Admin: 1 (as JupyterHub's user model says)."""

    async def get_user(self, handler: Any) -> User | None:
        user = await ensure_async(super().get_user(handler))
        name = handler.request.headers.get("X-Test-User")
        if user is None or not name:
            return user
        admin = handler.request.headers.get("X-Test-Admin") == "1"
        return HubUser(username=name, hub_user={"name": name, "groups": [], "admin": admin})


@pytest.fixture
def jp_server_config(store: JobStore) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_air": True},
            "identity_provider_class": HubHeaderIdentityProvider,
        },
        "GpuSampler": {"interval": 3600.0},
    }


@pytest.fixture
def day(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> Day:
    return scripted_day(monkeypatch, store, "alice", "bob", time.time())


async def usage(jp_fetch: Any, headers: dict[str, str], since: str = "24h") -> Any:
    answer = await jp_fetch("jupyter-air/gpu/usage", params={"since": since}, headers=headers)
    return json.loads(answer.body)


async def test_a_hub_user_sees_only_their_own_gpu_hours(jp_fetch: Any, day: Day) -> None:
    """bob may view alice's "train" job (a grant), yet its hours, id and name stay out of
    his usage view, as does alice's name."""
    doc = await usage(jp_fetch, {"X-Test-User": "bob"})
    assert doc["all_users"] is False
    assert [u["user"] for u in doc["users"]] == ["bob"]
    body = json.dumps(doc)
    for secret in ("alice", day.jobs["train"], day.jobs["retry"], "train", "retry"):
        assert secret not in body
    mallory = await usage(jp_fetch, {"X-Test-User": "mallory"}, "7d")
    assert mallory["users"] == []


async def test_a_hub_admin_sees_every_users_gpu_hours(jp_fetch: Any, day: Day) -> None:
    doc = await usage(jp_fetch, {"X-Test-User": "root", "X-Test-Admin": "1"})
    assert doc["all_users"] is True
    assert [(u["user"], u["gpu_hours"]) for u in doc["users"]] == [
        ("alice", pytest.approx(5.5, rel=1e-3)),
        ("bob", pytest.approx(2.0, rel=1e-3)),  # the day ends a moment ago
    ]


async def test_a_bad_window_is_refused_in_one_line(jp_fetch: Any, day: Day) -> None:
    with pytest.raises(HTTPClientError) as err:
        await usage(jp_fetch, {"X-Test-User": "bob"}, "1e9h")
    assert err.value.code == 400
    assert err.value.response is not None
    message = json.loads(err.value.response.body)["error"]["message"]
    assert message == "'since': a window is hours or days, e.g. 24h or 7d; got '1e9h'"
