"""Reads remembered for one web request: who the requester is in each group and the group tree
are asked for by many parts of one page (navigation, access checks, every table's scope), and
each would read them again. ``RequestMemoMiddleware`` opens an empty memo per request and drops it
at the end, so nothing outlives the request; outside a request (Celery, commands, tests calling
selectors) ``remember`` reads every time."""

from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")
_memo: ContextVar[dict | None] = ContextVar("klique_request_memo", default=None)


def remember(key: tuple, read: Callable[[], T]) -> T:
    """``read()``, once per request for ``key``."""
    memo = _memo.get()
    if memo is None:
        return read()
    if key not in memo:
        memo[key] = read()
    return memo[key]


def forget(kind: str) -> None:
    """Drop what this request remembered of ``kind`` (the first item of its keys), after a write."""
    memo = _memo.get()
    if memo:
        for key in [key for key in memo if key[0] == kind]:
            del memo[key]


class RequestMemoMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _memo.set({})
        try:
            return self.get_response(request)
        finally:
            _memo.reset(token)
