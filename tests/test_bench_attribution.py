"""The attribution bench's own arithmetic: the truth and what a scraper bills, on a timeline
small enough to work out by hand (the replay itself runs in tests/test_bench_smoke.py)."""

from __future__ import annotations

from bench.attribution import Pod, scraped, truth, workload


def pod(ns: str, start: float, end: float, share: float = 1.0) -> Pod:
    return Pod("u", ns, "p", "device-plugin", "r", "d", share, start, end, "cpu")


def test_truth_clips_to_the_window_and_applies_shares() -> None:
    pods = [pod("team-a", 0, 10), pod("team-b", 5, 100, 0.25), pod("team-c", 40, 50)]
    assert truth(pods, 2, 30) == {"team-a": 8, "team-b": 25 * 0.25, "team-c": 0, "team-d": 0}


def test_a_scraper_bills_whole_periods_to_whoever_is_alive_at_the_scrape() -> None:
    pods = [pod("team-a", 0, 10), pod("team-b", 10, 31)]
    # Scrapes at 0, 15 and 30 of a 40 s window: a sees one (15 s), b two (15 + 10 s).
    assert scraped(pods, 0, 40, 15, 0) == {"team-a": 15, "team-b": 25, "team-c": 0, "team-d": 0}
    # Phase 5: the first 5 s go to whoever the scrape at 5 sees; scrapes at 5, 20, 35.
    assert scraped(pods, 0, 40, 15, 5) == {"team-a": 20, "team-b": 15, "team-c": 0, "team-d": 0}


def test_the_workload_is_long_tailed_from_two_seconds() -> None:
    pods = [p for seed in range(10) for p in workload(300.0, seed)]
    lives = [p.end - p.start for p in pods]
    assert min(lives) >= 2.0
    short = sum(1 for t in lives if t < 30) / len(lives)
    assert 0.25 < short < 0.4, short  # a third, over ten seeds
    assert {p.mechanism for p in pods} == {"device-plugin", "dra"}
    assert any(p.share < 1 for p in pods)
