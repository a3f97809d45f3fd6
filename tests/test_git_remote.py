"""A repository's identity between machines: the normalized git remote, read from the repository's config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionmem.protocol.git_remote import (
    SHARE_FILE,
    RepositoryIdentity,
    checked_key,
    normalized_remote,
    remote_urls,
    repository_identity,
)
from sessionmem.protocol.project import project_of

SAME_REPOSITORY = [
    "git@github.com:Owner/Repo.git",
    "ssh://git@github.com:22/owner/repo",
    "ssh://git@github.com/Owner/Repo.git",
    "git+ssh://git@github.com/owner/repo",
    "https://user:token@github.com/owner/repo.git/",
    "https://github.com/Owner/Repo",
    "http://github.com/owner/repo/",
    "git://github.com/owner/repo",
    "https://x-access-token:ghs_abc@github.com/owner/repo.git",
    "  git@github.com:owner/repo.git\n",
]


@pytest.mark.parametrize("url", SAME_REPOSITORY)
def test_every_spelling_of_one_repository_is_one_key(url: str) -> None:
    assert normalized_remote(url) == "github.com/owner/repo"


@pytest.mark.parametrize("url", [
    "/srv/git/app.git", "./app", "../app", "~/src/app", "app", "app/.git", "file:///srv/git/app.git",
    "C:\\src\\app", "C:/src/app", "ssh://localhost/srv/app", "git@127.0.0.1:app", "", "https://", "host:",
])
def test_a_path_or_this_machine_is_no_key(url: str) -> None:
    assert normalized_remote(url) == ""


def test_nested_groups_ports_and_queries() -> None:
    assert normalized_remote("git@gitlab.com:Group/Sub/Repo.git") == "gitlab.com/group/sub/repo"
    assert normalized_remote("https://gitlab.com/group/sub/repo") == "gitlab.com/group/sub/repo"
    assert normalized_remote("ssh://git@gitlab.example.com:2222/group/repo.git") == "gitlab.example.com/group/repo"
    assert normalized_remote("https://github.com/o/r.git?ref=main#readme") == "github.com/o/r"
    assert normalized_remote("ssh://git@[2001:db8::1]:22/o/r") == normalized_remote("git@[2001:db8::1]:o/r")


# -- credentials never survive -------------------------------------------------------------

hosts = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5}){1,2}", fullmatch=True)
segment = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,15}", fullmatch=True).filter(
    lambda name: name.strip(".") and not name.lower().endswith(".git"))
users = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)
# A secret is distinctive (it could not be part of a host or path by chance), of any characters a
# password holds: ':' '/' '@' '#' '?' included.
secrets = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r\x00"), min_size=1, max_size=20).map(
    lambda tail: "SeCrEt~" + tail)


@given(host=hosts, owner=segment, repo=segment, user=users, port=st.integers(1, 65535))
def test_ssh_and_https_spellings_agree(host: str, owner: str, repo: str, user: str, port: int) -> None:
    key = f"{host}/{owner}/{repo}".lower()
    spellings = [
        f"{user}@{host}:{owner}/{repo}.git", f"{host}:{owner}/{repo}", f"ssh://{user}@{host}:{port}/{owner}/{repo}",
        f"ssh://{host}/{owner}/{repo}.git/", f"https://{host}/{owner}/{repo}.git", f"https://{user}@{host}/{owner}/{repo}",
        f"http://{host}:{port}/{owner}/{repo}/", f"git://{host}/{owner}/{repo}", f"git+ssh://{user}@{host}/{owner}/{repo}",
    ]
    assert {normalized_remote(url) for url in spellings} == {key}
    assert checked_key(key) == key  # a key is already what a key would be made into


@given(host=hosts, owner=segment, repo=segment, user=users, secret=secrets, port=st.integers(1, 65535))
def test_no_credential_survives(host: str, owner: str, repo: str, user: str, secret: str, port: int) -> None:
    spellings = [
        f"https://{user}:{secret}@{host}/{owner}/{repo}.git", f"https://{secret}@{host}/{owner}/{repo}",
        f"ssh://{user}:{secret}@{host}:{port}/{owner}/{repo}", f"{user}:{secret}@{host}:{owner}/{repo}",
        f"{secret}@{host}:{owner}/{repo}", f"git://{user}:{secret}@{host}/{owner}/{repo}",
    ]
    for url in spellings:
        for made in (normalized_remote(url), checked_key(url)):
            assert "secret" not in made, (url, made)
            assert made in ("", f"{host}/{owner}/{repo}".lower()), (url, made)


@given(host=hosts, owner=segment, repo=segment, evil=hosts, user=users, junk=users)
def test_no_remote_passes_for_another_repository(host: str, owner: str, repo: str, evil: str, user: str,
                                                  junk: str) -> None:
    """git connects to the host before the path: a "@" in the path (or in a query) made the key another
    repository's, one its user may have agreed to share."""
    key = f"{host}/{owner}/{repo}".lower()
    for url in (f"https://{evil}/@{host}/{owner}/{repo}.git", f"https://{evil}/{junk}@{host}/{owner}/{repo}",
                f"{evil}:{junk}@{host}:{owner}/{repo}.git", f"ssh://{user}@{evil}/{junk}@{host}/{owner}/{repo}",
                f"https://{evil}/x?y=@{host}/{owner}/{repo}", f"https://{evil}#@{host}/{owner}/{repo}",
                f"{evil}/{junk}@{host}/{owner}/{repo}"):
        for made in (normalized_remote(url), checked_key(url)):
            assert made != key and not made.startswith(f"{host}/"), (url, made)


@given(st.text(max_size=80))
def test_any_text_gives_a_key_without_scheme_or_user_and_keys_are_stable(text: str) -> None:
    key = normalized_remote(text)
    assert "://" not in key and "@" not in key and key == key.lower() and not key.endswith("/")
    assert checked_key(key) == key
    assert checked_key(text) == checked_key(checked_key(text))


# -- reading the repository ---------------------------------------------------------------


def test_config_syntax() -> None:
    config = """
[core]
    bare = false
[remote "upstream"]
    url = https://github.com/up/stream.git
[Remote "origin"] ; a comment
    URL = "git@github.com:Owner/Repo.git" # the fetch url
    url = https://ignored.example/second
[remote.Old]
    url = git@example.com:old/one
[remote "with \\"quote\\""]
    url = git@example.com:q/r\\
.git
"""
    assert remote_urls(config) == {
        "upstream": "https://github.com/up/stream.git",
        "origin": "git@github.com:Owner/Repo.git",
        "old": "git@example.com:old/one",
        'with "quote"': "git@example.com:q/r.git",
    }


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_clone_a_linked_worktree_and_a_subdirectory_agree(tmp_path: Path) -> None:
    main = tmp_path / "src" / "app"
    main.mkdir(parents=True)
    _git("init", "-q", cwd=main)
    _git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "first", cwd=main)
    _git("remote", "add", "upstream", "https://github.com/someone/else.git", cwd=main)
    assert repository_identity(str(main)) == RepositoryIdentity("github.com/someone/else", False)  # the first remote
    _git("remote", "add", "origin", "https://me:tok3n@github.com/Me/App.git", cwd=main)
    (main / "pkg" / "deep").mkdir(parents=True)
    linked = tmp_path / "elsewhere" / "feature"
    _git("worktree", "add", "-q", str(linked), cwd=main)
    (linked / SHARE_FILE).write_text("")
    assert repository_identity(str(main / "pkg" / "deep")) == RepositoryIdentity("github.com/me/app", False)
    assert repository_identity(str(linked)) == RepositoryIdentity("github.com/me/app", True)
    assert project_of(str(linked)) == project_of(str(main)) == "app"  # the display name is unchanged


def test_a_submodule_reads_its_own_config_and_no_repository_is_empty(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    (outer / ".git" / "modules" / "sub").mkdir(parents=True)
    (outer / ".git" / "config").write_text('[remote "origin"]\n\turl = git@github.com:o/outer.git\n')
    (outer / ".git" / "modules" / "sub" / "config").write_text('[remote "origin"]\n\turl = git@github.com:o/sub.git\n')
    (outer / "sub").mkdir()
    (outer / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert repository_identity(str(outer / "sub")).project_key == "github.com/o/sub"
    assert repository_identity(str(outer)).project_key == "github.com/o/outer"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / SHARE_FILE).write_text("")  # outside git the file means nothing: there is no repository root
    assert repository_identity(str(plain)) == RepositoryIdentity()
    assert repository_identity(str(tmp_path / "gone")) == RepositoryIdentity()
    assert repository_identity("C:\\Users\\me\\repo") == RepositoryIdentity()


def test_team_sharing_uses_the_protocols_file_name() -> None:
    from sessionmem.team import sharing

    assert sharing.SHARE_FILE == SHARE_FILE == ".sessionmem-share"
