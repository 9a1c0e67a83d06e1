"""Round 3 of trust: the record holds against a hostile node role.

Revision ID: f0005
Revises: f0004
Create Date: 2026-12-06

- ``fleet_ship_open`` (and the batch and snapshot functions, through ``fleet_ship_lock``) on
  a store of another node neither locks, writes nor returns anything of that store: it reads
  the row without a lock, and only a store of the caller's node is locked and counted.
- A snapshot of a store the fleet already holds events of must prove it continues them: it
  must keep the first event the fleet lacks, whose hash is recomputed from the fleet's head.
  A history pruned past that point (or a pruned clone, or a restored backup that ran on and
  pruned) is refused: everything before the first kept event would be the node's word.
- A node role opens at most :data:`STORES_PER_NODE` stores in service for its node (the
  schema owner's members are not bounded); node names are at most 253 characters.
- Event and snapshot times must lie in 1970 … 9999 (no ``infinity``, nothing Python's
  datetime cannot read back).
- The three entry points wait at most a minute for a lock (``lock_timeout``, set on the
  function: the caller cannot lift it).

The functions are f0002/f0003's frozen text with this revision's changes spliced in (each
splice point checked to be there once), written with CREATE OR REPLACE: the signatures are
unchanged, so the EXECUTE grants of ``fleet grant-node`` stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from podstore.fleet.migrations.versions import f0002_trust as f0002
from podstore.fleet.migrations.versions import f0003_node_state as f0003

revision: str = "f0005"
down_revision: str | None = "f0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STORES_PER_NODE = 64
_ENTRY_POINTS = (
    "fleet_ship_open(uuid, text)",
    f0002._PATH_NAMES[1],  # fleet_ship_batch
    f0003._SNAPSHOT_NEW,
)
_TS_CHECK = (
    "ts >= CAST('1970-01-01 00:00:00+00' AS timestamptz) "
    "AND ts < CAST('9999-01-01 00:00:00+00' AS timestamptz)"
)
_TS_TABLES = ("fleet_events", "fleet_snapshots")


def _replace(text: str) -> str:
    return f0003._splice(text, "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def _lock() -> str:
    text = _replace(f0003._f0002_function("fleet_ship_lock"))
    return f0003._splice(
        text,
        """    INSERT INTO fleet_stores (store_id, node) VALUES (p_store_id, p_node)
    ON CONFLICT (store_id) DO NOTHING;
""",
        f"""    IF length(p_node) > 253 THEN
        RAISE EXCEPTION 'fleet shipping: a node name is at most 253 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Another node's store is read, never locked nor written: the caller refuses it.
    SELECT * INTO st FROM fleet_stores WHERE store_id = p_store_id;
    IF FOUND AND st.node <> p_node THEN
        RETURN st;
    END IF;
    IF NOT FOUND THEN
        IF NOT pg_has_role(session_user,
                           (SELECT c.relowner FROM pg_class c
                            WHERE c.oid = CAST('@SCHEMA@.fleet_stores' AS regclass)), 'MEMBER')
           AND (SELECT count(*) FROM fleet_stores s
                WHERE s.node = p_node AND s.retired_at IS NULL) >= {STORES_PER_NODE} THEN
            RAISE EXCEPTION 'fleet shipping: node % has {STORES_PER_NODE} stores in service; '
                'retire those no longer used (podstore fleet retire --store ID) before '
                'shipping a new one', p_node USING ERRCODE = 'program_limit_exceeded';
        END IF;
        INSERT INTO fleet_stores (store_id, node) VALUES (p_store_id, p_node)
        ON CONFLICT (store_id) DO NOTHING;
    END IF;
""",
    )


def _check() -> str:
    text = _replace(f0003._f0002_function("fleet_ship_check"))
    # Another node's store first, and not counted there (its row is not this node's to write),
    # retired or not.
    retired_start = text.index("    IF st.retired_at IS NOT NULL THEN")
    node_start = text.index("    IF st.node <> p_node THEN")
    end = text.index("    RETURN NULL;\nEND")
    retired, other = text[retired_start:node_start], text[node_start:end]
    other = f0003._splice(other, "RETURN fleet_ship_refuse(st.store_id, format(", "RETURN (format(")
    return text[:retired_start] + other + retired + text[end:]


def _open() -> str:
    text = _replace(f0003._f0002_function("fleet_ship_open"))
    return f0003._splice(
        text,
        "    RETURN QUERY SELECT st.last_seq, st.head_hash, fleet_ship_check(st, p_node);\n",
        """    l_reason := fleet_ship_check(st, p_node);
    IF l_reason IS NOT NULL THEN
        -- Nothing of a store this node may not ship: neither its seq nor its head.
        RETURN QUERY SELECT CAST(NULL AS bigint), CAST(NULL AS bytea), l_reason;
        RETURN;
    END IF;
    RETURN QUERY SELECT st.last_seq, st.head_hash, CAST(NULL AS text);
""",
    ).replace("    st fleet_stores;\n", "    st fleet_stores;\n    l_reason text;\n", 1)


def _snapshot() -> str:
    text = _replace(f0003._snapshot())
    return f0003._splice(
        text,
        "    l_expect := fleet_chain_expected(st);\n",
        """    l_expect := fleet_chain_expected(st);
    -- The fleet holds events of this store: the snapshot must continue them, by keeping the
    -- first event the fleet lacks (its hash is recomputed from the fleet's head below).
    IF st.last_seq > 0 AND l_expect IS NOT NULL
       AND (l_n = 0 OR (l_kept[1]).seq <> st.last_seq + 1) THEN
        RETURN QUERY SELECT CAST(0 AS bigint), CAST(0 AS bigint), fleet_ship_refuse(
            p_store_id, format(
            'refused: store %s may have diverged from the fleet''s copy: the fleet holds it up '
            'to seq %s, and the node no longer keeps seq %s (pruned before it was shipped), so '
            'nothing proves that its history continues the fleet''s (a clone or a restored '
            'backup that pruned looks the same); nothing was written. If this is the genuine '
            'store: podstore fleet retire --store %s, then podstore reset-identity on the '
            'node, and ship again', p_store_id, st.last_seq, st.last_seq + 1, p_store_id));
        RETURN;
    END IF;
""",
    )


def _f0003_texts() -> list[str]:
    """The functions as f0003 left them (CREATE OR REPLACE), for the downgrade."""
    return [
        _replace(f0003._f0002_function("fleet_ship_lock")),
        _replace(f0003._f0002_function("fleet_ship_check")),
        _replace(f0003._f0002_function("fleet_ship_open")),
        _replace(f0003._snapshot()),
    ]


def upgrade() -> None:
    schema = f0002._schema()
    for text in (_lock(), _check(), _open(), _snapshot()):
        f0003._execute(f0003._render(text, schema))
    for name in _ENTRY_POINTS:
        f0003._execute(f"ALTER FUNCTION {name} SET lock_timeout = '1min'")
    for table in _TS_TABLES:
        op.create_check_constraint(f"ck_{table}_ts", table, _TS_CHECK)


def downgrade() -> None:
    for table in _TS_TABLES:
        op.drop_constraint(f"ck_{table}_ts", table, type_="check")
    for name in _ENTRY_POINTS:
        f0003._execute(f"ALTER FUNCTION {name} RESET lock_timeout")
    schema = f0002._schema()
    for text in _f0003_texts():
        f0003._execute(f0003._render(text, schema))
