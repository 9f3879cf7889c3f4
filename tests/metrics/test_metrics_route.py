"""``GET jupyter-air/metrics`` on a real Jupyter server: the metrics token reads it, and
nothing else does (the attacks of a notebook's own token, a browser's login, a guess);
the metrics token opens no other route."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking.energy import GRID_FILE
from tests.metrics.conftest import TwoUsers

pytestmark = pytest.mark.heavy  # a Jupyter server per test


def bearer(token_file: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_file.read_text().strip()}"}


async def refused(jp_fetch: Any, *route: str, **kwargs: Any) -> HTTPClientError:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*route, **kwargs)
    response = err.value.response
    assert response is not None
    for secret in (b"alice", b"bob", b"DCGM_FI", b"tune.ipynb"):
        assert secret not in response.body
    return err.value


@pytest.mark.parametrize("allow_unauthenticated_access", [True, False])
async def test_the_metrics_token_reads_the_metrics_with_the_holders_of_the_gpus(
    jp_fetch: Any, two_users: TwoUsers, token_file: Path, store: JobStore
) -> None:
    response = await jp_fetch("jupyter-air", "metrics", headers=bearer(token_file))
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.body.decode())}
    utils = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert utils["0"].labels["user"] == "alice"
    assert utils["0"].labels["air_job"] == two_users.alice_job
    assert utils["1"].labels["notebook"] == "bob/tune.ipynb"
    assert {s.labels["user"] for s in families["air_jobs"].samples} == {"alice", "bob"}
    # c.AirMetrics.grams_co2_per_kwh, kept where the user's jobs and air commands read it
    assert json.loads((store.home / GRID_FILE).read_text()) == {"grams_co2_per_kwh": 400.0}


async def test_the_notebook_token_a_login_cookie_or_a_guess_are_refused(
    jp_fetch: Any, jp_server_config: Any, token_file: Path
) -> None:
    server_token = (await jp_fetch("api", "status")).request.headers["Authorization"].split()[1]
    login = await jp_fetch("jupyter-air", "gpu")
    cookies = SimpleCookie()
    for header in login.headers.get_list("Set-Cookie"):
        cookies.load(header)
    session = "; ".join(f"{k}={v.value}" for k, v in cookies.items())
    assert session, "a token-authenticated request sets the login cookie"
    metrics_token = token_file.read_text().strip()
    attacks = {
        "no credential": {"Authorization": ""},
        "the notebook's token": {"Authorization": f"token {server_token}"},
        "the notebook's token as a bearer": {"Authorization": f"Bearer {server_token}"},
        "a browser's login": {"Authorization": "", "Cookie": session},
        "the metrics token with a character more": {"Authorization": f"Bearer {metrics_token}x"},
        "the metrics token as Jupyter's": {"Authorization": f"token {metrics_token}"},
    }
    for what, headers in attacks.items():
        err = await refused(jp_fetch, "jupyter-air", "metrics", headers=headers)
        assert err.code == 403, what
    err = await refused(
        jp_fetch,
        "jupyter-air",
        "metrics",
        headers={"Authorization": ""},
        params={"token": metrics_token},
    )
    assert err.code == 403, "the token in the URL (it would land in logs)"


async def test_the_metrics_token_opens_no_other_route(jp_fetch: Any, token_file: Path) -> None:
    for route in (("api", "kernels"), ("api", "contents"), ("jupyter-air", "gpu")):
        err = await refused(jp_fetch, *route, headers=bearer(token_file))
        assert err.code == 403, route


async def test_a_token_file_open_to_others_turns_the_route_off(
    jp_fetch: Any, token_file: Path
) -> None:
    token_file.chmod(0o644)
    err = await refused(jp_fetch, "jupyter-air", "metrics", headers=bearer(token_file))
    assert err.code == 503
    assert err.response is not None
    assert b"see the server log" in err.response.body
    token_file.chmod(0o600)
    assert (await jp_fetch("jupyter-air", "metrics", headers=bearer(token_file))).code == 200


@pytest.mark.parametrize("configured_token_file", [""])
async def test_without_a_token_file_the_route_is_off(jp_fetch: Any, token_file: Path) -> None:
    err = await refused(jp_fetch, "jupyter-air", "metrics", headers=bearer(token_file))
    assert err.code == 404
    assert err.response is not None
    assert b"set c.AirMetrics.token_file" in err.response.body
