"""The model at the pinned revision everywhere: the cache holds two snapshots and refs/main names the
one the catalog does not pin; doctor, the launch check and verify look at the pinned one only, and the
pin is confirmed against the (fake) hub's listing, or said to be unconfirmed when the hub is away.

The cache is made the way users make it: `kit model fetch` over the fake hub (tests/model/fake_hub.py),
once at main (another commit) and once at the catalog's pin.
"""

from __future__ import annotations

import pytest
from fake_hub import COMMIT, REPO, FakeHub, Repo, model_files

from kit.errors import InputError
from kit.launch import resolve
from kit.model import cache, fetch, require_model, verify
from kit.model.fetch import fetch_repo
from kit.model.hub import confirm_revision
from kit.model.snapshots import judge_cache, read_cache, scan_cache
from kit.pivot.doctor import doctor_context, evaluate
from kit.runtime.host import EngineFacts, HostFacts, read_nvml, scan_model_cache

MAIN = "fedcba9876543210fedcba9876543210fedcba98"  # where main is now: not the catalog's pin


@pytest.fixture
def hub():
    """The catalog pins COMMIT; the hub has moved main on to MAIN (other weights)."""
    newer = model_files(shard_bytes=300_000, shards=2)
    repo = Repo(newer, commit=MAIN, branches={"main": MAIN}, history={COMMIT: model_files()})
    with FakeHub({REPO: repo}) as fake:
        yield fake


def doctor_cache_check(target: str, state):
    facts = HostFacts(nvml=read_nvml(None), engine=EngineFacts(), model_cache=state)
    return next(c for c in evaluate(doctor_context(target), facts) if c.id == "model-cache")


def test_a_complete_snapshot_of_another_commit_is_not_the_pinned_model(env):
    fetch_repo(REPO, "main", env, ["*.json", "*.safetensors"])  # what `hf download REPO` would leave
    listing = read_cache(env, REPO)
    assert listing.refs == {"main": MAIN} and set(listing.snapshots) == {MAIN}

    unpinned = judge_cache(listing, None)  # what the old check read: refs/main, complete
    assert unpinned.present and unpinned.complete and unpinned.snapshot == MAIN

    pinned = scan_cache(env, REPO, COMMIT)
    assert not pinned.present and not pinned.complete and pinned.others == (MAIN,) and pinned.main == MAIN
    assert scan_model_cache(env / "hub", REPO, COMMIT) == pinned  # doctor's host facts say the same

    check = doctor_cache_check("fake", pinned)
    assert check.status == "fail" and check.fix == "kit model fetch fake"
    assert f"{REPO}@{COMMIT[:12]} is not in" in check.summary
    assert f"it holds {MAIN[:12]}" in check.summary and f"refs/main -> {MAIN[:12]}" in check.summary
    with pytest.raises(InputError):  # `kit up` refuses before any container, for the same reason
        require_model(resolve("fake"))


def test_with_both_snapshots_the_pinned_one_is_judged_and_refs_main_is_ignored(env):
    fetch_repo(REPO, "main", env, ["*.json", "*.safetensors"])
    result = fetch("fake")  # the catalog's pin
    assert result.revision == COMMIT
    assert (cache.repo_dir(env, REPO) / "refs" / "main").read_text() == MAIN  # untouched

    state = scan_cache(env, REPO, COMMIT)
    assert state.present and state.complete and state.snapshot == COMMIT and state.others == (MAIN,)
    assert state.files == 7 and state.bytes == sum(
        len(b) for n, b in model_files().items() if n.endswith((".json", ".safetensors"))
    )
    check = doctor_cache_check("fake", state)
    assert check.status == "pass" and COMMIT[:12] in check.summary
    require_model(resolve("fake"))

    # A shard of the pinned snapshot goes missing: the other snapshot being whole does not hide it.
    (cache.snapshot_dir(env, REPO, COMMIT) / "model-00002-of-00003.safetensors").unlink()
    broken = scan_cache(env, REPO, COMMIT)
    assert broken.present and not broken.complete
    assert broken.missing == ("model-00002-of-00003.safetensors",)
    assert doctor_cache_check("fake", broken).status == "fail"
    assert judge_cache(read_cache(env, REPO), None).complete  # refs/main's snapshot is still whole


def test_the_pin_is_confirmed_against_the_hubs_listing(env):
    check = confirm_revision(REPO, COMMIT)
    assert check.status == "confirmed" and check.main == MAIN
    assert (
        "confirmed by the hub's listing" in check.detail
        and f"main has moved on to {MAIN[:12]}" in check.detail
    )
    at_main = confirm_revision(REPO, MAIN)
    assert at_main.status == "confirmed" and "main's head" in at_main.detail

    wrong = confirm_revision(REPO, "f" * 40)
    assert wrong.status == "unknown" and "has no revision" in wrong.detail

    fetch("fake")
    report = verify("fake")
    assert report.ok and report.pin is not None and report.pin.status == "confirmed"
    offline = verify("fake", online=False)
    assert offline.ok and offline.pin.status == "unconfirmed" and "--offline" in offline.pin.detail


def test_an_unreachable_hub_is_said_not_passed(env, monkeypatch):
    fetch("fake")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    check = confirm_revision(REPO, COMMIT)
    assert check.status == "unconfirmed" and "cannot reach http://127.0.0.1:9" in check.detail
    report = verify("fake")  # the files are fine; the pin could not be confirmed, and it says so
    assert report.ok and report.pin.status == "unconfirmed"
    assert report.pin.line.startswith(f"revision {COMMIT[:12]}: not confirmed")


def test_kit_model_verify_prints_the_pin_and_fails_on_a_pin_the_hub_denies(env, hub):
    from catalog_helpers import run_cli

    fetch("fake")
    code, out, _ = run_cli(["model", "verify", "fake"])
    assert code == 0 and f"revision {COMMIT[:12]}: confirmed by the hub's listing" in out
    code, out, _ = run_cli(["model", "verify", "fake", "--offline"])
    assert code == 0 and "not confirmed against the hub (--offline)" in out

    hub.repos[REPO].history.clear()  # the hub no longer lists the pinned commit
    code, out, _ = run_cli(["model", "verify", "fake"])
    assert code == 1 and "has no revision" in out and "pin a commit the hub lists" in out
