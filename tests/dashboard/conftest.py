"""Fixtures of the dashboard tests: users with given permissions, API clients, runs in given states."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.cache import cache
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

import durable
from durable.runtime import get_engine
from durable.testing import run_until_settled
from durable_dashboard.models import ACTION_PERMISSIONS, NamespaceGrant
from tests.dashboard import browser
from tests.dashboard import workflows as _workflows  # noqa: F401  (registers them)

ALL_ACTIONS = tuple(ACTION_PERMISSIONS)


@pytest.fixture(autouse=True)
def _clean_cache():
    """Throttle counters and cached summaries must not leak between tests."""
    cache.clear()
    yield
    cache.clear()


def grant(user: User, *actions: str, view: bool = True, payloads: bool = True) -> User:
    """Give ``user`` durable.view_run (unless view=False) with durable.view_payloads (unless payloads=False)
    and the permissions of ``actions``."""
    perms = []
    if view:
        perms.append(Permission.objects.get(content_type__app_label="durable", codename="view_run"))
    if view and payloads:
        perms.append(Permission.objects.get(content_type__app_label="durable", codename="view_payloads"))
    for action in actions:
        perms.append(
            Permission.objects.get(content_type__app_label="durable_dashboard", codename=ACTION_PERMISSIONS[action][0])
        )
    user.user_permissions.add(*perms)
    return User.objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def make_user(db) -> Callable[..., User]:
    def make(
        name: str,
        *actions: str,
        view: bool = True,
        staff: bool = True,
        namespaces: tuple[str, ...] = (),
        payloads: bool = True,
    ) -> User:
        user = User.objects.create_user(name, password="pw", is_staff=staff)
        for ns in namespaces:
            NamespaceGrant.objects.create(user=user, namespace=ns)
        return grant(user, *actions, view=view, payloads=payloads)

    return make


@pytest.fixture
def staff_client(client):
    """The test client logged in as the user given."""

    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def viewer(make_user) -> User:
    return make_user("viewer")


@pytest.fixture
def operator(make_user) -> User:
    return make_user("operator", *ALL_ACTIONS)


@pytest.fixture
def scoped(make_user) -> User:
    """Every permission, but only namespace team-a."""
    return make_user("scoped", *ALL_ACTIONS, namespaces=("team-a",))


@pytest.fixture
def api() -> Callable[[User | None], APIClient]:
    def client_for(user: User | None = None) -> APIClient:
        client = APIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return client_for


@pytest.fixture
def make_run(db) -> Callable[..., str]:
    """Start a run and drive it until it waits or ends.

    Kinds: waiting (for signal "go"), failed, completed, step (a dispatched step pending), sleeping,
    pending (not run yet), query (sets event "stage", waits for update "approve"), source (completes;
    dash_listener subscribes to it).
    """

    def make(kind: str = "waiting", run_id: str | None = None, namespace: str | None = None, **kwargs: Any) -> str:
        workflow, data = {
            "waiting": ("dash_wait", {"n": 1}),
            "failed": ("dash_fail", {"n": 1}),
            "completed": ("dash_fail", {"ok": True}),
            "step": ("dash_step", 1),
            "sleeping": ("dash_sleep", None),
            "pending": ("dash_wait", {"n": 2}),
            "query": ("dash_query", None),
            "source": ("dash_source", None),
        }[kind]
        rid = durable.start(workflow, data, run_id=run_id, namespace=namespace, **kwargs)
        if kind == "step":
            get_engine().run_turn(rid)  # one turn only: the dispatched step stays pending
        elif kind != "pending":
            run_until_settled(rid)
        return rid

    return make


__all__ = ["ALL_ACTIONS", "Group", "grant"]


@pytest.fixture
def chromium(monkeypatch):
    """A headless Debian chromium driven by Playwright (see tests/dashboard/browser.py)."""
    yield from browser.launch(monkeypatch)


@pytest.fixture
def browser_page(chromium):
    """A desktop-sized (1,400 px) page."""
    return browser.new_page(chromium, browser.DESKTOP)
