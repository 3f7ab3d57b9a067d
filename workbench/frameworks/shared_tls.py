"""One TLS context for the httpx clients of a process that verify with httpx's defaults (standard library and httpx
only; loaded into a framework worker and an agent program's fork server, never into Workbench's interpreter).

httpx builds a new ``ssl.SSLContext`` for every client, loading the whole CA bundle each time, which is most of
what starting a client costs; verifiers starts several per episode. httpx's own advice is to build the context
once and pass it to each client: :func:`share` does that for every client that asks for the defaults
(``verify=True``, no client certificate), keyed by what decides the default context (``trust_env`` and the
``SSL_CERT_FILE``/``SSL_CERT_DIR`` variables), so a client that asks for anything else gets its own as before.
"""

import os


def share():
    """Make this process's httpx clients share their default TLS context (idempotent; nothing without httpx)."""
    try:
        from httpx._transports import default as transports
    except ImportError:
        return
    build = transports.create_ssl_context
    if getattr(build, "shares_default_context", False):
        return
    contexts = {}

    def create_ssl_context(verify=True, cert=None, trust_env=True):
        if verify is not True or cert:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")) if trust_env else (False,)
        if key not in contexts:
            contexts[key] = build(verify=True, cert=None, trust_env=trust_env)
        return contexts[key]

    create_ssl_context.shares_default_context = True  # type: ignore[attr-defined]
    transports.create_ssl_context = create_ssl_context
