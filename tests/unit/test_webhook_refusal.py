"""A webhook_url no delivery could reach under the webhook settings, and the setting named."""

from __future__ import annotations

import pytest

from schemas.settings import WebhookSettings


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://localhost/x",
                                 "http://[::1]:80/x", "http://2130706433/x",
                                 "http://[::ffff:127.0.0.1]/x"])
def test_loopback_names_its_setting(url: str) -> None:
    why = WebhookSettings().undeliverable(url)
    assert why is not None and "A5S_WEBHOOKS__ALLOW_LOOPBACK=true" in why
    assert WebhookSettings(allow_loopback=True).undeliverable(url) is None


@pytest.mark.parametrize("url", ["http://10.0.0.5/x", "http://[fd00::1]/x", "http://receiver/x",
                                 "http://hooks.internal/x"])
def test_private_is_allowed_by_default_and_names_its_setting_when_not(url: str) -> None:
    assert WebhookSettings().undeliverable(url) is None
    why = WebhookSettings(allow_private=False).undeliverable(url)
    assert why is not None and "A5S_WEBHOOKS__ALLOW_PRIVATE=true" in why
    assert "ALLOW_LOOPBACK" not in why


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest", "http://[fe80::1]/x",
                                 "http://224.0.0.1/x"])
def test_link_local_and_multicast_are_never_allowed(url: str) -> None:
    why = WebhookSettings(allow_private=True, allow_loopback=True).undeliverable(url)
    assert why is not None and "no setting allows" in why


def test_public_hosts_pass() -> None:
    assert WebhookSettings(allow_private=False).undeliverable("https://hooks.example.com/x") is None
    assert WebhookSettings().undeliverable("http://8.8.8.8/x") is None
