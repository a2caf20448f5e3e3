"""`after_commit`: an action runs once its transaction commits, and never for work rolled back."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import after_commit, transaction
from pipelines_dagster.app_db.models import Workspace


def test_an_action_runs_once_the_outermost_transaction_commits_and_not_for_a_rolled_back_savepoint(sessions):
    done: list[str] = []
    with transaction(sessions) as session:
        session.execute(sa.select(Workspace.id)).all()
        after_commit(session, lambda: done.append("outer"))
        with session.begin_nested():
            after_commit(session, lambda: done.append("released savepoint"))
        with pytest.raises(RuntimeError), session.begin_nested():
            after_commit(session, lambda: done.append("rolled-back savepoint"))
            raise RuntimeError("undone")
        assert done == []
    assert done == ["outer", "released savepoint"]
    session.commit()
    assert done == ["outer", "released savepoint"]


def test_an_action_of_a_rolled_back_transaction_never_runs(sessions):
    done: list[str] = []
    with sessions() as session:
        session.execute(sa.select(Workspace.id)).all()
        after_commit(session, lambda: done.append("rolled back"))
        session.rollback()
        session.execute(sa.select(Workspace.id)).all()
        after_commit(session, lambda: done.append("committed"))
        session.commit()
    assert done == ["committed"]
