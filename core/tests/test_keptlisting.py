"""The kept listing the DigitalOcean and Equinix Metal load balancers share: what a user sees is
the number of list calls a burst of Services costs, and that a load balancer the process just
made or deleted is never looked up wrongly in a listing kept from before."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from polyccm.keptlisting import KeptListing


class Cloud:
    """Resources by id, listed through :meth:`list_all` (each call counted), on a clock the
    test moves."""

    def __init__(self, **items: str) -> None:
        self.items = dict(items)
        self.lists = 0
        self.now = 100.0
        self.listing_takes = 0.0

    def clock(self) -> float:
        return self.now

    def list_all(self) -> Iterator[tuple[str, str]]:
        self.lists += 1
        found = list(self.items.items())
        self.now += self.listing_takes  # the pages take this long
        yield from found


def test_one_listing_serves_every_lookup_within_the_age_they_accept() -> None:
    cloud = Cloud(lb1="web")
    kept = KeptListing(cloud.list_all, clock=cloud.clock)

    assert kept.current(5) == {"lb1": "web"}
    cloud.now += 5
    assert kept.current(5) == {"lb1": "web"}
    assert cloud.lists == 1
    cloud.now += 0.5
    cloud.items["lb2"] = "api"  # made by someone else meanwhile
    assert kept.current(5) == {"lb1": "web", "lb2": "api"}
    assert cloud.lists == 2


def test_an_age_of_zero_always_lists_again() -> None:
    cloud = Cloud(lb1="web")
    kept = KeptListing(cloud.list_all, clock=cloud.clock)

    kept.current(0)
    kept.current(0)

    assert cloud.lists == 2


def test_the_age_counts_from_when_the_listing_began() -> None:
    # A listing of 5,000 load balancers takes seconds; what it lacks may have been made from
    # its first page on, so its age starts there.
    cloud = Cloud(lb1="web")
    cloud.listing_takes = 4.0
    kept = KeptListing(cloud.list_all, clock=cloud.clock)

    kept.current(5)
    cloud.now += 1.5  # 5.5 s after the listing began, 1.5 s after it ended
    kept.current(5)

    assert cloud.lists == 2


def test_what_the_process_makes_and_deletes_is_applied_to_the_kept_listing() -> None:
    cloud = Cloud(lb1="web")
    kept = KeptListing(cloud.list_all, clock=cloud.clock)
    before = kept.current(5)

    kept.put("lb2", "api")
    kept.drop("lb1")

    assert kept.current(5) == {"lb2": "api"}
    assert cloud.lists == 1
    # What a caller already holds does not change under it.
    assert before == {"lb1": "web"}


def test_a_change_before_any_listing_is_left_to_the_listing() -> None:
    cloud = Cloud(lb1="web")
    kept = KeptListing(cloud.list_all, clock=cloud.clock)

    kept.put("lb9", "gone-since")

    assert kept.current(5) == {"lb1": "web"}


def test_forget_makes_the_next_lookup_list_again() -> None:
    # A new leadership term: another replica may have changed the cloud meanwhile.
    cloud = Cloud(lb1="web")
    kept = KeptListing(cloud.list_all, clock=cloud.clock)
    kept.current(60)
    cloud.items["lb2"] = "api"

    kept.forget()

    assert kept.current(60) == {"lb1": "web", "lb2": "api"}
    assert cloud.lists == 2


def test_callers_asking_while_a_listing_is_made_share_it() -> None:
    cloud = Cloud(lb1="web")
    listing = threading.Event()
    proceed = threading.Event()

    def slow_list_all() -> Iterator[tuple[str, str]]:
        listing.set()
        proceed.wait()
        yield from cloud.list_all()

    kept = KeptListing(slow_list_all, clock=cloud.clock)
    answers: list[object] = []
    first = threading.Thread(target=lambda: answers.append(kept.current(5)))
    first.start()
    listing.wait()
    second = threading.Thread(target=lambda: answers.append(kept.current(5)))
    second.start()
    proceed.set()
    first.join()
    second.join()

    assert answers == [{"lb1": "web"}, {"lb1": "web"}]
    assert cloud.lists == 1
