"""DigitalOcean's list pagination: ``page``/``per_page`` in, ``links.pages`` and ``meta.total``
out.

``links.pages`` holds absolute URLs to the ``first``/``prev`` pages (when not on the first) and
the ``next``/``last`` pages (when not on the last), each keeping the request's other query
parameters, as the real API does; a single page has ``{"pages": {}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 200

T = TypeVar("T")


@dataclass(frozen=True)
class Page:
    page: int
    per_page: int

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Page:
        """The requested page (the OpenAPI check has already bounded both numbers)."""
        page = int(query.get("page", 1))
        per_page = min(int(query.get("per_page", DEFAULT_PER_PAGE)), MAX_PER_PAGE)
        return cls(page=max(page, 1), per_page=max(per_page, 1))

    def slice(self, items: Sequence[T]) -> list[T]:
        start = (self.page - 1) * self.per_page
        return list(items[start : start + self.per_page])


def paginated(
    key: str,
    items: Sequence[Any],
    page: Page,
    *,
    url: str,
    query: Mapping[str, str],
) -> dict[str, Any]:
    """The body of a list answer: ``{key: [...], "links": {...}, "meta": {"total": n}}``.

    ``items`` are already rendered; ``url`` is the absolute URL of the list without a query.
    """
    total = len(items)
    last = max(1, -(-total // page.per_page))

    def link(number: int) -> str:
        params = {k: v for k, v in query.items() if k not in ("page", "per_page")}
        params.update(page=str(number), per_page=str(page.per_page))
        return f"{url}?{urlencode(params)}"

    pages: dict[str, str] = {}
    if page.page > 1:
        pages["first"] = link(1)
        pages["prev"] = link(min(page.page - 1, last))
    if page.page < last:
        pages["next"] = link(page.page + 1)
        pages["last"] = link(last)
    return {key: page.slice(items), "links": {"pages": pages}, "meta": {"total": total}}
