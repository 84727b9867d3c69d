"""Credentials and outbound HTTP, shared by the gateway, the pipeline, the stores and the SDK.

The bottom layer: it imports nothing of the service's own packages.

* :mod:`security.signing`: webhook signatures (Standard Webhooks) and upload-URL signatures;
* :mod:`security.tokens`: bearer tokens read and compared in one place;
* :mod:`security.addresses`: which URLs and addresses a user-given URL may reach;
* :mod:`security.netguard`: the outbound HTTP client that enforces it at connect time.
"""
