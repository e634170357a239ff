"""The parts of uvicorn the gateway reaches into are still there, in the shape it relies on.

``gateway/http/connection_limits.py`` subclasses uvicorn's private ``HttpToolsProtocol``: it calls its private methods,
reads the attributes its methods set, and replaces two of its methods whole; ``gateway/cli/shutdown.py`` subclasses
``uvicorn.Server``; ``gateway/http/websocket_close.py`` subclasses ``WebSocketsSansIOProtocol`` and relies on its
``send`` arming ``close_timer`` when it writes the application's close frame (and ``handle_close`` ending on it). None
of that is uvicorn's public API, so pyproject.toml pins uvicorn to the minor versions on which the connection-limit
tests pass, and this test says exactly what moved when a new uvicorn changes any of it. What the gateway uses is read
from its own source, so a new use is checked without editing this file.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap

import pytest
import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.websockets import websockets_sansio_impl

from gateway.cli.shutdown import DrainingServer
from gateway.http.connection_limits import GuardedHttpToolsProtocol
from gateway.http.websocket_close import PolicyClosingWebSocketProtocol

# uvicorn's methods that the gateway replaces without calling them, as reviewed (compared as syntax trees: layout and
# comments do not count). When uvicorn changes one, port the change into connection_limits.py, then paste it here.
REPLACED = {
    (httptools_impl.HttpToolsProtocol, "data_received"): """
def data_received(self, data: bytes) -> None:
    self._unset_keepalive_if_required()
    try:
        self.parser.feed_data(data)
    except httptools.HttpParserError:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)
        return
    except httptools.HttpParserUpgrade:
        if self._should_upgrade():
            self.handle_websocket_upgrade()
        else:
            self._unsupported_upgrade_warning()
""",
    (httptools_impl.HttpToolsProtocol, "send_400_response"): """
def send_400_response(self, msg: str) -> None:
    content = [STATUS_LINE[400]]
    for name, value in self.server_state.default_headers:
        content.extend([name, b": ", value, b"\\r\\n"])
    content.extend(
        [
            b"content-type: text/plain; charset=utf-8\\r\\n",
            b"content-length: " + str(len(msg)).encode("ascii") + b"\\r\\n",
            b"connection: close\\r\\n",
            b"\\r\\n",
            msg.encode("ascii"),
        ]
    )
    self.transport.write(b"".join(content))
    self.transport.close()
""",
}

SUBCLASSES = [
    pytest.param(GuardedHttpToolsProtocol, httptools_impl.HttpToolsProtocol, id="HttpToolsProtocol"),
    pytest.param(DrainingServer, uvicorn.Server, id="Server"),
    pytest.param(
        PolicyClosingWebSocketProtocol, websockets_sansio_impl.WebSocketsSansIOProtocol, id="WebSocketsSansIOProtocol"
    ),
]


def _class_tree(cls: type) -> ast.ClassDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return node


def _own_methods(cls: type) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {
        node.name: node for node in _class_tree(cls).body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _assigned_on_self(cls: type) -> set[str]:
    """``self.X`` that the methods of ``cls`` assign (uvicorn sets its state in its methods, not in annotations)."""
    names: set[str] = set()
    for node in ast.walk(_class_tree(cls)):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            names.update(e.attr for e in elements if isinstance(e, ast.Attribute) and _is_self(e.value))
    return names


def _uvicorn_attributes(cls: type) -> set[str]:
    """What an instance of ``cls`` has: its members, and what its methods and its uvicorn bases' methods assign."""
    assigned = (_assigned_on_self(klass) for klass in cls.__mro__ if klass.__module__.startswith("uvicorn"))
    return set(dir(cls)).union(*assigned)


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _names_used_on(cls: type, receiver: str) -> set[str]:
    """``receiver.X`` read or called anywhere in ``cls`` (``receiver`` is ``self``, or a local such as ``cycle``)."""
    return {
        node.attr
        for node in ast.walk(_class_tree(cls))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == receiver
    }


def _calls_super(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
        for node in ast.walk(method)
    )


@pytest.mark.parametrize(("ours", "theirs"), SUBCLASSES)
def test_every_uvicorn_member_the_gateway_uses_is_still_there(ours: type, theirs: type) -> None:
    ours_defines = set(vars(ours)) | set(inspect.get_annotations(ours)) | _assigned_on_self(ours)
    missing = _names_used_on(ours, "self") - ours_defines - _uvicorn_attributes(theirs)
    assert not missing, f"uvicorn {uvicorn.__version__}: {theirs.__qualname__} no longer has {sorted(missing)}"


@pytest.mark.parametrize(("ours", "theirs"), SUBCLASSES)
def test_every_method_the_gateway_overrides_keeps_its_parameters(ours: type, theirs: type) -> None:
    changed = {}
    for name in _own_methods(ours).keys() - {"__init__"}:  # ours takes *args, **kwargs
        if hasattr(theirs, name):
            their_parameters = list(inspect.signature(getattr(theirs, name)).parameters)
            our_parameters = list(inspect.signature(getattr(ours, name)).parameters)
            if their_parameters != our_parameters:
                changed[name] = (their_parameters, our_parameters)
    assert not changed, f"uvicorn {uvicorn.__version__}: {theirs.__qualname__}'s parameters (theirs, ours): {changed}"


def test_the_request_cycle_still_has_what_the_refusals_read() -> None:
    cycle = httptools_impl.RequestResponseCycle
    used = _names_used_on(GuardedHttpToolsProtocol, "cycle")
    assert used, "connection_limits.py reads the cycle as `cycle`: keep that name or update this test"
    missing = used - _uvicorn_attributes(cycle)
    assert not missing, f"uvicorn {uvicorn.__version__}: RequestResponseCycle no longer has {sorted(missing)}"


def test_the_methods_the_gateway_replaces_are_as_reviewed() -> None:
    replaced = {
        name for name, method in _own_methods(GuardedHttpToolsProtocol).items() if not _calls_super(method)
    } & set(dir(httptools_impl.HttpToolsProtocol))
    assert replaced == {name for _, name in REPLACED}, "a method replaced whole is missing from REPLACED"
    for (cls, name), reviewed in REPLACED.items():
        was, now = ast.parse(reviewed), ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, name))))
        if ast.dump(was) != ast.dump(now):
            diff = difflib.unified_diff(ast.unparse(was).splitlines(), ast.unparse(now).splitlines(), lineterm="")
            pytest.fail(f"uvicorn {uvicorn.__version__} changed {cls.__qualname__}.{name}:\n" + "\n".join(diff))


def test_the_status_lines_the_refusals_write_are_there() -> None:
    assert httptools_impl.STATUS_LINE[431] == b"HTTP/1.1 431 Request Header Fields Too Large\r\n"


def _arms_close_timer(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)`` somewhere in ``method``."""
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "close_timer" and _is_self(t.value) for t in node.targets)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "call_later"
        for node in ast.walk(method)
    )


def test_the_websocket_close_still_arms_the_timer_the_policy_close_replaces() -> None:
    # PolicyClosingWebSocketProtocol tells a close it wrote by the timer uvicorn arms for the client's reply; were it
    # armed elsewhere (or no more), a policy close would go back to reading the client for close_timeout.
    send = _own_methods(websockets_sansio_impl.WebSocketsSansIOProtocol)["send"]
    assert _arms_close_timer(send), f"uvicorn {uvicorn.__version__}: send no longer arms close_timer on a close"


# uvicorn's methods whose behaviour PolicyClosingWebSocketProtocol relies on without replacing them, as reviewed: the
# client's close reply closes the transport when close_timer is armed (the policy close arms its own).
RELIED_ON = {
    (websockets_sansio_impl.WebSocketsSansIOProtocol, "handle_close"): """
def handle_close(self, event: Frame) -> None:
    if self.close_sent:
        # The peer echoed our close frame: the closing handshake is complete.
        if self.close_timer is not None:
            self.close_timer.cancel()
            self.close_timer = None
            self.transport.close()
        return
    if not self.transport.is_closing():
        assert self.conn.close_rcvd is not None
        code = self.conn.close_rcvd.code
        reason = self.conn.close_rcvd.reason
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})

        output = self.conn.data_to_send()
        self.transport.write(b"".join(output))
        self.transport.close()
""",
}


def test_the_methods_the_policy_close_relies_on_are_as_reviewed() -> None:
    for (cls, name), reviewed in RELIED_ON.items():
        was, now = ast.parse(reviewed), ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, name))))
        if ast.dump(was) != ast.dump(now):
            diff = difflib.unified_diff(ast.unparse(was).splitlines(), ast.unparse(now).splitlines(), lineterm="")
            pytest.fail(f"uvicorn {uvicorn.__version__} changed {cls.__qualname__}.{name}:\n" + "\n".join(diff))
