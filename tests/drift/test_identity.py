"""Whose drift evidence a request is: the credential's hash, a trusted header, or anonymous."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.config import Settings, load_settings
from gatekeeper.drift.identity import ANONYMOUS, checked_headers, client_identity, evidence_identity
from gatekeeper.errors import ConfigError, CredentialConflict


def settings(**changes: Any) -> Settings:
    return Settings.model_validate({"upstream": {"base_url": "http://127.0.0.1:9/v1"}, **changes})


PLAIN = settings()


def test_the_bearer_token_is_hashed_never_shown() -> None:
    who = client_identity({"authorization": "Bearer sk-secret-1"}, PLAIN)
    assert who.startswith("key:") and len(who) == 20 and "secret" not in who
    assert who == client_identity({"authorization": "bearer  sk-secret-1 "}, PLAIN)
    assert who != client_identity({"authorization": "Bearer sk-secret-2"}, PLAIN)


def test_the_same_key_through_either_header_is_one_client() -> None:
    # Native Messages reads x-api-key; the OpenAI and Anthropic clients of one key are one client.
    native = settings(upstream={"base_url": "http://127.0.0.1:9/v1", "protocols": ["chat", "messages"]})
    by_key = client_identity({"x-api-key": "sk-secret-1"}, native, protocol="messages")
    assert by_key.startswith("key:")
    assert by_key == client_identity({"authorization": "Bearer sk-secret-1"}, native)
    both = {"authorization": "Bearer sk-secret-1", "x-api-key": "sk-secret-1"}
    assert client_identity(both, native, protocol="messages") == by_key


def test_two_different_credentials_are_refused() -> None:
    # The upstream checks one of them; a made-up other one must neither make a new client nor
    # (as anonymous) shed the client's own demotion.
    with pytest.raises(CredentialConflict, match="authorization and x-api-key"):
        client_identity({"authorization": "Bearer one", "x-api-key": "made-up"}, PLAIN)
    with pytest.raises(CredentialConflict, match="api-key"):
        client_identity({"authorization": "Bearer one", "api-key": "made-up"}, PLAIN)
    same = {"authorization": "Bearer one", "x-api-key": "one"}
    assert client_identity(same, PLAIN) == client_identity({"authorization": "Bearer one"}, PLAIN)


def test_a_repeated_credential_header_with_two_values_is_refused() -> None:
    from starlette.datastructures import Headers

    twice = Headers(raw=[(b"authorization", b"Bearer real"), (b"authorization", b"Bearer made-up")])
    with pytest.raises(CredentialConflict, match="two authorization headers"):
        client_identity(twice, PLAIN)


def test_a_credential_in_a_header_the_upstream_does_not_check_is_anonymous() -> None:
    # An OpenAI-compatible upstream reads Authorization: an x-api-key or api-key beside none is
    # checked by nobody, so each made-up value would be a new client.
    assert client_identity({"x-api-key": "made-up"}, PLAIN) == ANONYMOUS
    assert client_identity({"api-key": "made-up"}, PLAIN) == ANONYMOUS
    # Translated to chat, a Messages request's x-api-key reaches a chat upstream unread.
    assert client_identity({"x-api-key": "made-up"}, PLAIN, protocol="messages") == ANONYMOUS


def test_an_azure_upstream_is_identified_by_its_api_key_header() -> None:
    azure = settings(upstream={"base_url": "https://acme.openai.azure.com/openai/v1"})
    assert checked_headers(azure) == ("api-key",)
    real = client_identity({"api-key": "real-azure-key"}, azure)
    assert real.startswith("key:")
    # Made-up bearer tokens beside the real key mint nobody: refused; alone they are anonymous.
    with pytest.raises(CredentialConflict):
        client_identity({"api-key": "real-azure-key", "authorization": "Bearer made-up"}, azure)
    assert client_identity({"authorization": "Bearer made-up"}, azure) == ANONYMOUS


def test_the_checked_header_is_configurable() -> None:
    by_api_key = settings(drift={"credential_header": "api-key"})
    assert checked_headers(by_api_key, "messages") == ("api-key",)
    assert client_identity({"api-key": "k"}, by_api_key).startswith("key:")
    assert client_identity({"authorization": "Bearer k"}, by_api_key) == ANONYMOUS
    unchecked = settings(drift={"credential_header": "none"})  # the upstream takes any key
    assert checked_headers(unchecked) == ()
    assert client_identity({"authorization": "Bearer anything"}, unchecked) == ANONYMOUS
    # auto: the default, derived from the upstream.
    assert checked_headers(PLAIN, "messages") == ("authorization",)  # translated: the chat upstream reads it
    native = settings(upstream={"base_url": "http://127.0.0.1:9/v1", "protocols": ["messages"]})
    assert checked_headers(native, "messages") == ("x-api-key", "authorization")  # a key or an auth token
    assert checked_headers(native, "chat") == ("authorization",)


def test_a_bad_credential_header_is_refused_at_start_up(tmp_path) -> None:
    config = tmp_path / "gatekeeper.yaml"
    config.write_text("drift:\n  credential_header: cookie\n")
    with pytest.raises(ConfigError, match=r"drift\.credential_header"):
        load_settings(config)


def test_no_credential_is_anonymous() -> None:
    assert client_identity({}, PLAIN) == ANONYMOUS
    assert client_identity({"authorization": "Bearer "}, PLAIN) == ANONYMOUS
    assert client_identity({"x-api-key": "  "}, PLAIN) == ANONYMOUS


def test_an_x_api_key_the_upstream_never_checks_is_anonymous() -> None:
    # With upstream.api_key the proxy sends the operator's key; the client's x-api-key proves nothing.
    operated = settings(upstream={"base_url": "http://127.0.0.1:9/v1", "api_key": "operator"})
    assert client_identity({"x-api-key": "anything"}, operated) == ANONYMOUS
    assert client_identity({"authorization": "Bearer mine"}, operated).startswith("key:")
    # The same with the operator's Basic credential in the URL (sent when the client sends no Authorization).
    in_url = settings(upstream={"base_url": "http://op:secret@127.0.0.1:9/v1"})
    assert {client_identity({"x-api-key": f"made-up-{i}"}, in_url) for i in range(3)} == {ANONYMOUS}
    assert client_identity({"authorization": "Bearer mine"}, in_url).startswith("key:")


def test_answers_of_a_litellm_route_count_as_anonymous() -> None:
    routed = settings(models=[{"name": "claude", "litellm_model": "anthropic/claude-x"}])
    who = client_identity({"authorization": "Bearer mine"}, routed)
    assert evidence_identity(who, routed, "claude") == ANONYMOUS  # its provider never sees the key
    assert evidence_identity(who, routed, "other") == who


def test_a_trusted_header_replaces_the_credential() -> None:
    fronted = settings(drift={"client_header": "X-Forwarded-User"})
    front = "127.0.0.1"  # a trusted proxy by default
    alice = client_identity({"x-forwarded-user": "alice", "authorization": "Bearer shared"}, fronted, front)
    bob = client_identity({"x-forwarded-user": "bob", "authorization": "Bearer shared"}, fronted, front)
    assert alice.startswith("hdr:") and alice != bob
    assert client_identity({"authorization": "Bearer shared"}, fronted, front) == ANONYMOUS  # no fallback
    assert client_identity({"x-forwarded-user": "alice"}, fronted, None) == ANONYMOUS  # no address, no trust


def test_an_oversized_credential_is_no_identity() -> None:
    assert client_identity({"authorization": "Bearer " + "x" * 5000}, PLAIN) == ANONYMOUS


def test_the_trusted_header_is_believed_only_from_a_trusted_proxy() -> None:
    fronted = settings(drift={"client_header": "x-forwarded-user"}, trusted_proxies=["10.0.0.0/8"])
    headers = {"x-forwarded-user": "alice"}
    assert client_identity(headers, fronted, peer="10.1.2.3").startswith("hdr:")
    assert client_identity(headers, fronted, peer="192.0.2.7") == ANONYMOUS  # straight from a client
    assert client_identity(headers, fronted, peer="not-an-address") == ANONYMOUS
