"""How the store contract fails: run by pytest against stores that break it on purpose
(tests/wrong_stores.py), as a store author runs it, every failure says which promise, what
the contract expected and what the store did, and none is a bare AssertionError."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the contract run by pytest in a process of its own

TESTS = Path(__file__).resolve().parent
PAGE = TESTS.parent / "docs" / "custom-stores.md"

_SUITE = f"""
import sys

import pytest

sys.path.insert(0, {str(TESTS)!r})
from wrong_stores import WrongProfileStore, WrongThreadStore

from statekernel.testing.store_contract import ProfileStoreContract, ThreadStoreContract


class TestWrongProfileStore(ProfileStoreContract):
    @pytest.fixture
    async def profile_store(self):
        async with WrongProfileStore() as store:
            yield store

    @pytest.fixture
    def break_entry(self, profile_store):
        async def corrupt(namespace, key):
            _, version, updated_at = profile_store.rows[namespace][key]
            profile_store.rows[namespace][key] = (b"{{not json", version, updated_at)

        return corrupt


class TestWrongThreadStore(ThreadStoreContract):
    @pytest.fixture
    async def thread_store(self):
        async with WrongThreadStore() as store:
            yield store

    @pytest.fixture
    def edit_record(self, thread_store):
        async def edit(thread_id, revision, data):
            records = thread_store.threads_by_id[thread_id].records
            if data is None:
                del records[revision]
            else:
                records[revision] = data

        return edit
"""

# Each failing test, and what its failure says: the promise, then `expected ..., got ...`.
FAILURES = {
    "TestWrongProfileStore::test_one_entry_that_no_longer_decodes_costs_only_itself": (
        "ProfileStore.get of an entry that no longer decodes (break_entry('ns', 'bad')), raised "
        "as DecodeFailed(namespace, key, cause): expected DecodeFailed(key='ns', "
        "record='bad'), got DecodeFailed(key='bad', record='ns')."
    ),
    "TestWrongProfileStore::test_compare_and_set_refuses_and_keeps_what_is_stored": (
        "ProfileStore.set(..., expected_version=0) of an entry at version 1, raised as "
        "VersionConflict(namespace, key, expected_version, version found): expected "
        "VersionConflict(namespace='ns', key='k', expected=0, actual=1), got "
        "ValueError(\"stale version 0 of 'k': it is at 1\")."
    ),
    "TestWrongProfileStore::test_names_no_store_can_keep_are_refused_alike": (
        "ProfileStore.set of the key 't\\ud800' (a lone surrogate), refused by check_name: "
        "expected ValueError whose message holds 'lone surrogate', got no exception: it "
        "returned Entry(namespace='ns', key='t\\ud800', value=1, version=1, updated_at="
    ),
    "TestWrongProfileStore::test_list_is_sorted_by_literal_prefix_and_clear_empties_one_"
    "namespace": (
        "ProfileStoreContract.test_list_is_sorted_by_literal_prefix_and_clear_empties_one_"
        "namespace (`list` gives a namespace's entries sorted by key, by a literal prefix; "
        "`clear` empties one namespace only): expected no exception here, got KeyError('c')."
    ),
    "TestWrongThreadStore::test_threads_are_listed_sorted_by_literal_prefix": (
        "ThreadStore.threads(prefix='b', limit=1): the first of them: expected ['b-1'], got "
        "['b-1', 'b-2']."
    ),
    "TestWrongThreadStore::test_a_record_beyond_the_head_is_journal_corrupted[1]": (
        "Kernel.start_run of a thread of 5 commits with a record of revision 6 added by "
        "edit_record (ThreadStore.load must return every record it holds, also those past the "
        "head): expected JournalCorrupted(revision=6) whose message holds 'a record of "
        "revision 6 beyond its head (revision 5)', got no exception: it returned <Run "
    ),
    "TestWrongThreadStore::test_a_record_beyond_the_head_is_journal_corrupted[2]": (
        "expected JournalCorrupted(revision=6) whose message holds 'records of revisions 6 to 7 "
        "beyond its head (revision 5)', got no exception: it returned <Run "
    ),
}


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """pytest's output for the contract run against the wrong stores, in a folder of its
    own (so none of this suite's configuration applies)."""
    folder = tmp_path_factory.mktemp("wrong_stores")
    (folder / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    (folder / "test_wrong.py").write_text(_SUITE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tb=short", "-rf"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, f"pytest exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_only_the_broken_promises_fail(output: str) -> None:
    failed = set(re.findall(r"^FAILED test_wrong\.py::(\S+)", output, re.MULTILINE))
    assert failed == set(FAILURES), output
    assert re.search(r"\b7 failed, 20 passed, 8 skipped\b", output), output


@pytest.mark.parametrize("test", list(FAILURES))
def test_a_failure_says_the_promise_what_was_expected_and_what_came(output: str, test: str) -> None:
    broken = [
        line.split("ContractBroken: ", 1)[1]
        for line in output.splitlines()
        if line.startswith("E ") and "ContractBroken: " in line
    ]
    assert any(FAILURES[test] in line for line in broken), "\n".join(broken)


def test_every_failure_is_a_contract_broken_never_a_bare_assertion(output: str) -> None:
    """Each failure ends in one ContractBroken, pointing at the page listing the promises;
    no `assert` of the contract shows as its bare expression or an empty AssertionError."""
    lines = output.splitlines()
    ends = [line for line in lines if re.match(r"^E\s+\S*ContractBroken: ", line)]
    assert len(ends) == len(FAILURES), output
    assert all(line.endswith("'What the contract checks'.)") for line in ends), ends
    bare = [line for line in lines if re.match(r"^E\s+(AssertionError\s*$|assert )", line)]
    assert not bare, output


def test_the_docs_show_a_failure_as_the_contract_words_it(output: str) -> None:
    """docs/custom-stores.md quotes the failure of a swapped DecodeFailed word for word."""
    quoted = FAILURES[
        "TestWrongProfileStore::test_one_entry_that_no_longer_decodes_costs_only_itself"
    ]
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    assert quoted in page
    assert quoted in output
