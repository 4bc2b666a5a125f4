"""The REST API's DRF policy, fixed on its views so a project's ``REST_FRAMEWORK`` cannot change it.

Every view of :mod:`durable_dashboard.urls` takes its authentication, parsers,
renderers, throttling, schema and exception handling from :class:`DashboardAPI`:
the API behaves as documented whatever the project's DRF defaults are (or
with no ``REST_FRAMEWORK`` setting at all).

* Authentication: a DRF token (when ``rest_framework.authtoken`` is installed)
  or the Django session (the admin's login), with CSRF for the session.
* Requests: JSON only, through :class:`~durable_dashboard.parsers.BoundedJSONParser`;
  a body over :func:`~durable_dashboard.parsers.max_body_bytes` is a JSON 413
  before anything reads it (its bytes are drained so the client sees the answer).
* Errors: :func:`durable_dashboard.errors.exception_handler`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.apps import apps
from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import BaseAuthentication, SessionAuthentication, TokenAuthentication
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.views import APIView

from durable_dashboard.errors import exception_handler, payload_too_large
from durable_dashboard.parsers import BoundedJSONParser, max_body_bytes
from durable_dashboard.throttling import DurableUserThrottle

# Past this, an oversized body is not read to its end: the connection is closed instead.
DRAIN_LIMIT = 64 * 1024 * 1024


if TYPE_CHECKING:
    _View = APIView
else:
    _View = object


class DashboardPolicy(_View):
    """Mixin of every API view, the schema's too: authentication, throttling, errors, body size."""

    throttle_classes = [DurableUserThrottle]
    versioning_class = None
    # drf-spectacular's, whatever DEFAULT_SCHEMA_CLASS says (the generator refuses any other).
    schema = AutoSchema()

    def get_authenticators(self) -> list[BaseAuthentication]:
        found: list[BaseAuthentication] = [SessionAuthentication()]
        if apps.is_installed("rest_framework.authtoken"):
            found.insert(0, TokenAuthentication())
        return found

    def get_exception_handler(self) -> Any:
        return exception_handler

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if _content_length(request) > max_body_bytes():
            _drain(request)
            self.args, self.kwargs = args, kwargs
            drf_request = self.initialize_request(request, *args, **kwargs)
            self.request = drf_request
            self.headers = self.default_response_headers
            response = self.finalize_response(drf_request, payload_too_large(), *args, **kwargs)
            return response
        return super().dispatch(request, *args, **kwargs)


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _drain(request: HttpRequest) -> None:
    """Read and drop the body of a refused request, so the client is not cut off mid-upload."""
    remaining = _content_length(request)
    if remaining > DRAIN_LIMIT:
        return
    stream: Any = request
    while remaining > 0:
        chunk = stream.read(min(remaining, 1024 * 1024))
        if not chunk:
            return
        remaining -= len(chunk)


class JSONEndpoint(DashboardPolicy):
    """Mixin of the API's own endpoints: JSON in and out, documented by drf-spectacular."""

    parser_classes = [BoundedJSONParser]

    def get_renderers(self) -> list[BaseRenderer]:
        # The browsable API needs DRF's templates; JSON always works.
        if apps.is_installed("rest_framework"):
            return [JSONRenderer(), BrowsableAPIRenderer()]
        return [JSONRenderer()]


_F = TypeVar("_F")


def documented(**kwargs: Any) -> Callable[[_F], _F]:
    """drf-spectacular's ``extend_schema``, based on its own AutoSchema whatever ``DEFAULT_SCHEMA_CLASS`` says.

    ``extend_schema`` bases a method's schema on the project's default schema
    class as it is when the module is imported; with DRF's own default that
    schema cannot be generated at all.
    """

    def decorator(f: _F) -> _F:
        if not inspect.isclass(f) and "schema" not in (getattr(f, "kwargs", None) or {}):
            f.kwargs = {**(getattr(f, "kwargs", None) or {}), "schema": AutoSchema}  # type: ignore[attr-defined]
        decorated: _F = extend_schema(**kwargs)(f)  # type: ignore[type-var]
        return decorated

    return decorator
