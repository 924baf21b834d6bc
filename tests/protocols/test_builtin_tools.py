"""The shared table of typed built-in tools (gatekeeper/protocols/builtin_tools.py): Responses and
Messages build their `tools` tables from it and chat reads it, so a built-in listed anywhere else
would be one that chat's gate does not know the fields of."""

from __future__ import annotations

from gatekeeper.protocols import builtin_tools
from gatekeeper.protocols.messages import fields as messages_fields
from gatekeeper.protocols.responses import fields as responses_fields
from gatekeeper.rules.tools import BUILTIN_FAMILIES


def test_every_type_of_the_shared_table_is_a_built_in_with_a_family() -> None:
    assert builtin_tools.RESPONSES_BUILTIN_TOOLS.keys() <= BUILTIN_FAMILIES.keys()
    assert builtin_tools.MESSAGES_BUILTIN_TOOLS.keys() <= BUILTIN_FAMILIES.keys()


def test_a_protocol_takes_its_built_ins_from_the_shared_table_only() -> None:
    for own, shared in (
        (responses_fields.RESPONSES_TOOL, builtin_tools.RESPONSES_BUILTIN_TOOLS),
        (messages_fields.MESSAGES_TOOL, builtin_tools.MESSAGES_BUILTIN_TOOLS),
    ):
        assert {kind for kind in own if kind in BUILTIN_FAMILIES} == shared.keys()
        assert all(own[kind] is fields for kind, fields in shared.items())
