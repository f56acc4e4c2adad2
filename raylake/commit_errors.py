"""The errors of commits and of the store under them: a lost race, a commit that
failed or whose outcome is unknown, a store that cannot create atomically, has no
credentials, space or patience left. Import them from :mod:`raylake.errors`, which
re-exports them (defined there, that module would be too long to read); nothing here
imports it, so there is no import cycle."""

from __future__ import annotations

from raylake.error_root import RaylakeError


class CommitConflictError(RaylakeError):
    """A commit lost a race with a concurrent commit it conflicts with."""

    __module__ = "raylake.errors"

    def __init__(self, message: str, *, expected: int | None = None, actual: int | None = None):
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class UnsafeCommitError(RaylakeError):
    """The store cannot create a file atomically if absent, so concurrent commits could
    overwrite each other; the table needs the single-writer option (or another store)."""

    __module__ = "raylake.errors"

    def __init__(self, uri: str, store: str, upgrade: str | None = None) -> None:
        self.uri = uri
        self.store = store
        self.upgrade = upgrade
        fix = f"Install {upgrade} (older releases overwrite instead), or, if" if upgrade else "If"
        super().__init__(
            f"{store} (at {uri!r}) cannot create a file atomically if it is absent, so two "
            f"concurrent commits could both succeed and one would be lost. {fix} only one "
            "process commits to this table at a time, create it with "
            "options={'commit.single-writer': 'true'}; otherwise use a store with atomic "
            "create-if-absent (local files, S3, memory://); see docs/object-stores.md"
        )


class MissingCredentialsError(RaylakeError, PermissionError):
    """This process has no credentials for a store: the secrets the driver was given did
    not reach it, and the store's own credential chain (environment, config files,
    instance roles) has none either. The message names the fix."""

    __module__ = "raylake.errors"

    def __init__(self, uri: str, reason: str) -> None:
        self.uri = uri
        self.reason = reason
        super().__init__(
            f"this process has no credentials for {uri!r}: {reason}. Pass the credentials in "
            "storage_options on the driver (with Ray initialized before the work is submitted, "
            "so that Ray workers fetch them from the object store), or give every process the "
            "store's own credentials (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or an instance role; storage_options={'anon': True} for a public "
            "bucket); see docs/object-stores.md"
        )


class CommitFailedError(RaylakeError):
    """A commit could not be completed (retries exhausted); nothing was committed."""

    __module__ = "raylake.errors"


class CommitStateUnknownError(RaylakeError):
    """A commit point's create failed in a way that may have carried it out, and the store
    could not be read to tell: the commit may or may not be visible. Nothing it wrote was
    deleted (a visible snapshot may name it); look at the table before committing again."""

    __module__ = "raylake.errors"

    def __init__(self, path: str, attempts: int, cause: BaseException | None) -> None:
        super().__init__(
            f"the outcome of creating {path!r} is unknown after {attempts} tries ({cause!r}): "
            "it may have been committed. Nothing it wrote was deleted; read the table's latest "
            "snapshot before committing again (files of a commit that did not land are orphans "
            "that remove_orphan_files deletes)"
        )
        self.path = path
        self.attempts = attempts


class CommitLineageUnknownError(CommitStateUnknownError):
    """A commit created its snapshot, but the snapshot it was based on was expired by
    then (or ``replaced``: its id holds another commit, re-created after expiration):
    another writer may have made the same snapshot id meanwhile, and snapshot expiration
    deleted it, so that this create took a free name below the table's latest snapshot.
    A table's first commit (no parent) is reported where newer snapshots were there.
    Whether the commit is part of the table's history cannot be told; nothing it wrote
    was deleted."""

    __module__ = "raylake.errors"

    def __init__(self, path: str, parent_id: int | None, *, replaced: bool = False) -> None:
        fate = "holds another commit" if replaced else "was expired by then"
        what = (
            f"its parent, snapshot {parent_id}, {fate}"
            if parent_id is not None
            else "it is the table's first commit and newer snapshots were there"
        )
        RaylakeError.__init__(
            self,
            f"created {path!r}, but {what}: "
            "another commit may have taken this snapshot id before expiration deleted it, "
            "so the commit may not be part of the table's history. Nothing it wrote was "
            "deleted; read the table's latest snapshot before committing again",
        )
        self.path = path
        self.attempts = 1


class StorageRetriesExhaustedError(RaylakeError, OSError):
    """A storage request kept failing with transient errors up to the retry bound."""

    __module__ = "raylake.errors"

    def __init__(self, operation: str, path: str, attempts: int, cause: BaseException) -> None:
        super().__init__(f"{operation} of {path!r} failed after {attempts} tries: {cause}")
        self.operation = operation
        self.path = path
        self.attempts = attempts


class StorageAccessDeniedError(RaylakeError, PermissionError):
    """The store refused a request: credentials it does not know (a wrong or expired key)
    or a policy that denies the request. Another try would be refused again."""

    __module__ = "raylake.errors"

    def __init__(self, operation: str, path: str, cause: BaseException) -> None:
        super().__init__(
            f"{operation} of {path!r} was refused by the store ({cause}); check the "
            "credentials given (storage_options, or the store's own credential chain) and "
            "what the store allows them (a bucket's policy, the files' permissions); see "
            "docs/object-stores.md"
        )
        self.operation = operation
        self.path = path


class StorageFullError(RaylakeError, OSError):
    """The store had no space left (ENOSPC) for a write; nothing was committed."""

    __module__ = "raylake.errors"

    def __init__(self, uri: str, cause: BaseException) -> None:
        super().__init__(
            f"no space left on the store of {uri!r} ({cause}); nothing was committed, the table "
            "is as it was, and the files this write had written were removed"
        )
        self.uri = uri
