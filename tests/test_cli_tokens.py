"""`workspace list|show` and `token create|list|show|revoke` as a user runs them: named tokens, each secret
printed once, the last use the API records, a revoke the API honours at once; and the token every workspace
had before revision 0012 keeps working, named `default`."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from fastapi.testclient import TestClient

from pipelines_dagster.api.app import create_app
from pipelines_dagster.api.schemas.tokens import NewTokenOut, TokenList, TokenOut
from pipelines_dagster.api.schemas.workspaces import WorkspaceList, WorkspaceOut
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.settings import load_settings
from tests.app_db.test_document_per_pipeline import insert
from tests.test_cli import api, cli, workspace  # noqa: F401  (fixtures)


def test_workspace_list_and_show_name_each_workspace_with_its_live_tokens(cli, workspace):
    other = cli.json("workspace", "create", "--name", "Globex", "--owner", "user-2")
    listed = WorkspaceList.model_validate(cli.json("workspace", "list"))
    assert [(w.id, w.name, w.owner, w.live_tokens) for w in listed.workspaces] == [
        (workspace["id"], "Acme", "user-1", 1),
        (other["id"], "Globex", "user-2", 1),
    ]
    assert "Globex\towner user-2\t1 live token" in cli("workspace", "list").output
    shown = WorkspaceOut.model_validate(cli.json("workspace", "show", "--workspace", str(other["id"])))
    assert (shown.name, shown.live_tokens) == ("Globex", 1)
    missing = cli("workspace", "show", "--workspace", "999", ok=False)
    assert "workspace 999 does not exist" in missing.output


def test_workspace_create_names_its_token_and_says_how_to_make_another(cli):
    cli("db", "upgrade")
    printed = cli("workspace", "create", "--name", "Acme", "--owner", "user-1").output
    assert "API token 'default' (shown once, store it now): pdk_" in printed
    assert "pipelines-dagster token create --workspace 1 --name NAME" in printed


def test_tokens_are_named_shown_once_used_through_the_api_and_refused_once_revoked(cli, workspace, api):
    created = cli("token", "create", "--workspace", str(workspace["id"]), "--name", "ci").output
    secret = created.split("store it now): ")[1].strip()
    assert secret.startswith("pdk_")
    agent = NewTokenOut.model_validate(
        cli.json("token", "create", "--workspace", str(workspace["id"]), "--name", "agent")
    )
    with cli.engine().connect() as conn:
        stored = conn.execute(sa.text("SELECT name, token_hash, prefix FROM api_tokens ORDER BY id")).all()
    assert [row.name for row in stored] == ["default", "ci", "agent"]
    assert stored[1].token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in (row.token_hash, row.prefix) for row in stored)

    listed = TokenList.model_validate(cli.json("token", "list", "--workspace", str(workspace["id"])))
    assert [(t.name, t.last_used_at) for t in listed.tokens] == [("default", None), ("ci", None), ("agent", None)]
    assert secret not in cli("token", "list", "--workspace", str(workspace["id"])).output

    # The API records a token's use; `token show` reads it back.
    pipelines = f"/workspaces/{workspace['id']}/pipelines"
    assert api.get(pipelines, headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    ci_id = str(listed.tokens[1].id)
    shown = TokenOut.model_validate(cli.json("token", "show", "--workspace", str(workspace["id"]), "--token", ci_id))
    assert shown.name == "ci" and shown.last_used_at is not None and shown.last_used_at >= shown.created_at
    assert "last used never" not in cli("token", "show", "--workspace", str(workspace["id"]), "--token", ci_id).output

    revoked = cli("token", "revoke", "--workspace", str(workspace["id"]), "--token", ci_id).output
    assert f"token {ci_id} (ci) of workspace {workspace['id']} revoked" in revoked
    answer = api.get(pipelines, headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 401 and "revoked" in answer.json()["detail"]
    assert api.get(pipelines, headers={"Authorization": f"Bearer {agent.token}"}).status_code == 200
    live = TokenList.model_validate(cli.json("token", "list", "--workspace", str(workspace["id"])))
    assert [t.name for t in live.tokens] == ["default", "agent"]
    every = cli.json("token", "list", "--workspace", str(workspace["id"]), "--include-revoked")
    assert [t["name"] for t in every["tokens"]] == ["default", "ci", "agent"] and every["tokens"][1]["revoked_at"]


def test_bad_token_commands_say_what_to_fix_and_write_nothing(cli, workspace):
    ws = str(workspace["id"])
    cli("token", "create", "--workspace", ws, "--name", "ci")
    assert (
        "already has a token named 'ci'" in cli("token", "create", "--workspace", ws, "--name", "ci", ok=False).output
    )
    assert "--name: must not be empty" in cli("token", "create", "--workspace", ws, "--name", " ", ok=False).output
    assert "workspace 42 does not exist" in cli("token", "create", "--workspace", "42", "--name", "x", ok=False).output
    other = cli.json("workspace", "create", "--name", "Globex", "--owner", "user-2")
    [theirs] = cli.json("token", "list", "--workspace", str(other["id"]))["tokens"]
    # Another workspace's token is not found under this one, and revoking it there does nothing.
    refused = cli("token", "revoke", "--workspace", ws, "--token", str(theirs["id"]), ok=False).output
    assert f"workspace {ws} has no token {theirs['id']}" in refused
    theirs_now = cli.json("token", "show", "--workspace", str(other["id"]), "--token", str(theirs["id"]))
    assert theirs_now["revoked_at"] is None
    with cli.engine().connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM api_tokens")).scalar_one() == 3


def test_the_token_a_workspace_had_before_named_tokens_keeps_working_as_default(cli):
    import dagster as dg

    # A deployment at revision 0011, whose workspaces each had the one token `workspace create` printed.
    old_token = "pdk_made-before-names"
    engine = cli.engine()
    upgrade(engine, "0011")
    with engine.begin() as conn:
        workspace_id = insert(conn, "workspaces", name="Acme", owner_user_id="user-1", created_at="2026-11-01")
        old_hash = hashlib.sha256(old_token.encode()).hexdigest()
        values = {"token_hash": old_hash, "prefix": old_token[:12], "created_at": "2026-11-01"}
        insert(conn, "api_tokens", workspace_id=workspace_id, **values)
    engine.dispose()

    cli("db", "upgrade")
    [default] = cli.json("token", "list", "--workspace", str(workspace_id))["tokens"]
    assert (default["name"], default["prefix"], default["revoked_at"]) == ("default", old_token[:12], None)
    with (
        dg.instance_for_test() as instance,
        TestClient(create_app(settings=load_settings(), instance=instance)) as client,
    ):
        answer = client.get(f"/workspaces/{workspace_id}/tokens", headers={"Authorization": f"Bearer {old_token}"})
    assert answer.status_code == 200 and answer.json()["tokens"][0]["last_used_at"] is not None
    # Its name is taken while it lives, as any token's.
    taken = cli("token", "create", "--workspace", str(workspace_id), "--name", "default", ok=False).output
    assert "already has a token named 'default'" in taken
