"""latchkey's own Schemathesis check (loaded through SCHEMATHESIS_HOOKS by
scripts/schemathesis.sh): every error answer is a problem document that the
OpenAPI document declares for that operation and status.

Schemathesis's built-in checks see that a status is documented and that the
body matches the `Problem` schema; this one also sees that the problem's
`type` is one of the examples documented for that very status (the slugs a
reader of /docs is promised), that its `status` member equals the HTTP
status, and that the media type is application/problem+json.
"""

import json
import os

import schemathesis

with open(os.environ.get("LATCHKEY_OPENAPI", "openapi/openapi.json"), encoding="utf-8") as file:
    DOCUMENT = json.load(file)


def documented_types(path, method, status):
    """The problem types documented as examples of one operation's status."""
    responses = DOCUMENT["paths"][path][method.lower()]["responses"]
    response = responses.get(str(status), {})
    content = response.get("content", {}).get("application/problem+json", {})
    return {example["value"]["type"] for example in content.get("examples", {}).values()}


@schemathesis.check
def documented_problem(ctx, response, case):
    status = response.status_code
    if status < 400:
        return None
    path, method = case.operation.path, case.operation.method
    if case.method.lower() != method.lower():
        # A method the path does not have (Schemathesis's unsupported_method
        # check): the service's one answer for that is 405 method-not-allowed.
        method, types = case.method, {"/problems/method-not-allowed"}
    else:
        types = documented_types(path, method, status)
    media_type = response.headers.get("content-type", [""])
    media_type = media_type[0] if isinstance(media_type, list) else media_type
    if media_type.split(";")[0].strip() != "application/problem+json":
        raise AssertionError(f"{status} answered as {media_type!r}, not application/problem+json")
    try:
        problem = json.loads(response.content)
    except ValueError as error:
        raise AssertionError(f"{status} body is not JSON: {error}") from None
    if problem.get("status") != status:
        raise AssertionError(f"problem status {problem.get('status')!r} differs from the HTTP status {status}")
    if problem.get("type") not in types:
        raise AssertionError(
            f"{method.upper()} {path} answered {status} {problem.get('type')!r}; "
            f"documented for {status}: {sorted(types) or 'none'}"
        )
    return None
