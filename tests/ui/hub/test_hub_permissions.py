"""Job permissions on a real JupyterHub: alice's server, shared with bob."""

from __future__ import annotations

import pytest

from tests.ui.hub.conftest import Hub


@pytest.fixture(scope="module")
def alice_server(hub: Hub) -> Hub:
    hub.start_server("alice")
    return hub


def test_alice_server_serves_the_extension_through_the_proxy(alice_server: Hub) -> None:
    response = alice_server.as_user("alice", "GET", "user/alice/jupyter-air/gpu")
    assert response.status == 200, response
    me = alice_server.as_user("alice", "GET", "user/alice/api/me")
    assert me.body["identity"]["username"] == "alice"


def test_bob_reaches_alice_server_only_after_she_shares_it(alice_server: Hub) -> None:
    before = alice_server.request("GET", "user/alice/api/me", alice_server.new_token("bob"))
    assert before.status == 403, before
    alice_server.share("alice", "bob")
    me = alice_server.as_user("bob", "GET", "user/alice/api/me")
    assert me.status == 200, me
    assert me.body["identity"]["username"] == "bob"
