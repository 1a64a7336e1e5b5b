"""Catalog parsing: the shipped defaults load, and every bad file or key is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sentinel.canary.catalog import CatalogError, apply_overrides, default_directory, load_catalog
from sentinel.canary.spec import CanaryKind
from sentinel.config.settings import CanaryOverride
from sentinel.verdict import Action

ASSET = Path(str(default_directory().joinpath("assets", "canary.png")))


def text_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "text",
        "kind": "text",
        "request": {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2},
    }
    spec.update(overrides)
    return spec


def structured_spec(**overrides: Any) -> dict[str, Any]:
    spec = text_spec(name="structured", kind="structured")
    spec["schema"] = {"type": "string", "enum": ["ok-{nonce}"]}
    spec.update(overrides)
    return spec


def multimodal_spec(**overrides: Any) -> dict[str, Any]:
    spec = text_spec(name="multimodal", kind="multimodal", image="assets/canary.png")
    spec.update(overrides)
    return spec


def write_catalog(directory: Path, files: dict[str, Any]) -> Path:
    (directory / "assets").mkdir(exist_ok=True)
    shutil.copy(ASSET, directory / "assets" / "canary.png")
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (directory / name).write_text(text)
    return directory


def test_defaults_load_with_design_values() -> None:
    catalog = load_catalog()
    assert catalog.kinds() == (
        CanaryKind.TEXT,
        CanaryKind.STRUCTURED,
        CanaryKind.MULTIMODAL,
        CanaryKind("correctness"),
    )
    text = catalog.get("text")
    assert (text.priority, text.deadline, text.interval, text.jitter) == (-100, 8.0, 5.0, 0.1)
    assert text.policy == "restart"
    assert 1 <= text.request["max_tokens"] <= 4
    for name in ("structured", "multimodal"):
        spec = catalog.get(name)
        assert (spec.priority, spec.deadline, spec.interval, spec.policy) == (
            -100,
            10.0,
            10.0,
            "restart",
        )
    assert catalog.get("structured").schema == {"type": "string", "enum": ["ok-{nonce}"]}
    image = catalog.get("multimodal").image
    assert image is not None
    assert image.startswith(b"\x89PNG")


def test_a_directory_loads_with_kind_defaults(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"a.yaml": text_spec(), "b.yaml": structured_spec()})
    catalog = load_catalog(tmp_path)
    assert [s.name for s in catalog.specs] == ["text", "structured"]
    assert catalog.get("structured").deadline == 10.0
    assert catalog.get("text").source == f"{tmp_path}/a.yaml"


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    spec = text_spec()
    del spec["name"]
    write_catalog(tmp_path, {"quick-text.yaml": spec})
    assert load_catalog(tmp_path).specs[0].name == "quick-text"


BAD_FILES: list[tuple[str, Any, str, str]] = [
    ("unknown kind", text_spec(kind="foo"), "kind", "unknown canary kind 'foo' (expected text"),
    ("unknown key", text_spec(retries=3), "retries", "unknown key"),
    ("missing kind", {"name": "x", "request": {}}, "kind", "required"),
    ("missing request", {"name": "x", "kind": "text"}, "request", "required"),
    ("string deadline", text_spec(deadline="8"), "deadline", "valid number"),
    ("zero deadline", text_spec(deadline=0), "deadline", "greater than 0"),
    ("deadline over budget", text_spec(deadline=11, interval=5), "deadline", "exceeds 2 x"),
    ("jitter too large", text_spec(jitter=0.9), "jitter", "less than or equal to 0.5"),
    ("bad policy", text_spec(policy="reboot"), "policy", "restart"),
    ("bad endpoint", text_spec(endpoint="/v1/embeddings"), "endpoint", "/v1/chat/completions"),
    ("slo over deadline", text_spec(latency_slo=9), "latency_slo", "below the deadline"),
    ("bad name", text_spec(name="Has Space"), "name", "must match"),
    (
        "template sets priority",
        text_spec(
            request={"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "priority": 0}
        ),
        "request.priority",
        "set by sentinel",
    ),
    (
        "no max_tokens",
        text_spec(request={"messages": [{"role": "user", "content": "x"}]}),
        "request.max_tokens",
        "positive integer",
    ),
    (
        "no messages on chat",
        text_spec(request={"prompt": "x", "max_tokens": 1}),
        "request.prompt",
        "takes messages",
    ),
    (
        "messages on completions",
        text_spec(endpoint="/v1/completions"),
        "request.messages",
        "takes prompt",
    ),
    (
        "no user message",
        text_spec(request={"messages": [{"role": "system", "content": "x"}], "max_tokens": 1}),
        "request.messages",
        "user message",
    ),
    ("schema on text", text_spec(schema={"type": "string"}), "schema", "not used by a text"),
    ("structured without schema", structured_spec(schema=None), "schema", "required"),
    (
        "schema without nonce",
        structured_spec(schema={"type": "string", "enum": ["ok"]}),
        "schema",
        "{nonce} placeholder",
    ),
    (
        "invalid schema",
        structured_spec(schema={"type": "strung", "enum": ["ok-{nonce}"]}),
        "schema",
        "not a valid JSON schema",
    ),
    ("multimodal without image", multimodal_spec(image=None), "image", "required"),
    ("missing image", multimodal_spec(image="assets/nope.png"), "image", "cannot read"),
    ("image on completions", multimodal_spec(endpoint="/v1/completions"), "endpoint", "needs"),
    ("absolute image", multimodal_spec(image=str(ASSET)), "image", "inside the catalog"),
    ("image above catalog", multimodal_spec(image="../canary.png"), "image", "no '..'"),
    ("image dot-dot inside", multimodal_spec(image="assets/../../x.png"), "image", "no '..'"),
    ("not a mapping", "- just\n- a list\n", "", "must be a mapping"),
    ("broken yaml", "kind: [text\n", "line", "not valid YAML"),
]


@pytest.mark.parametrize(
    ("content", "key", "message"),
    [pytest.param(c, k, m, id=i) for i, c, k, m in BAD_FILES],
)
def test_bad_file_is_refused_naming_file_and_key(
    tmp_path: Path, content: Any, key: str, message: str
) -> None:
    files: dict[str, Any] = {"x.yaml": content}
    if not (isinstance(content, dict) and content.get("kind") == "text"):
        files["control.yaml"] = text_spec(name="control")
    write_catalog(tmp_path, files)
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path)
    assert caught.value.file == f"{tmp_path}/x.yaml"
    assert caught.value.key.startswith(key)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{tmp_path}/x.yaml: ")


def test_unknown_kind_message_lists_the_registry(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"x.yaml": text_spec(kind="foo")})
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path}/x.yaml: kind: unknown canary kind 'foo' "
        "(expected text, structured, multimodal, correctness)"
    )


def test_duplicate_names_are_refused_naming_both_files(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"a.yaml": text_spec(), "b.yaml": text_spec()})
    with pytest.raises(CatalogError, match=r"b\.yaml: name: duplicate canary name 'text'.*a\.yaml"):
        load_catalog(tmp_path)


def test_path_kinds_need_a_text_control(tmp_path: Path) -> None:
    write_catalog(
        tmp_path,
        {"s.yaml": structured_spec(), "t.yaml": text_spec(enabled=False)},
    )
    with pytest.raises(CatalogError, match=r"s\.yaml: kind: .*needs an enabled text canary"):
        load_catalog(tmp_path)


def test_disabled_specs_do_not_count_as_kinds(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"t.yaml": text_spec(), "s.yaml": structured_spec(enabled=False)})
    catalog = load_catalog(tmp_path)
    assert catalog.kinds() == (CanaryKind.TEXT,)
    assert len(catalog.specs) == 2


def test_overrides_change_only_the_canaries_they_name() -> None:
    catalog = load_catalog()
    overrides = {"structured": CanaryOverride(interval=20.0, policy=Action.ALERT, enabled=False)}
    specs = {s.name: s for s in apply_overrides(catalog.enabled(), overrides)}
    structured = specs["structured"]
    assert (structured.interval, structured.policy, structured.enabled) == (20.0, "alert", False)
    assert type(structured.policy) is str
    assert structured.deadline == catalog.get("structured").deadline
    assert specs["text"] == catalog.get("text")


def test_an_override_of_no_canary_is_a_catalog_error_naming_it() -> None:
    catalog = load_catalog()
    overrides = {"txet": CanaryOverride(interval=1.0), "text": CanaryOverride(interval=2.0)}
    with pytest.raises(CatalogError) as caught:
        apply_overrides(catalog.enabled(), overrides, source="sentinel.yaml")
    assert (caught.value.file, caught.value.key) == ("sentinel.yaml", "canaries")
    assert "no canary named 'txet' in the catalog" in caught.value.problem
    assert "(it has correctness, multimodal, structured, text)" in caught.value.problem


def test_empty_and_missing_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no canary files"):
        load_catalog(tmp_path)
    with pytest.raises(CatalogError, match="not a directory"):
        load_catalog(tmp_path / "absent")


def test_catalog_reaches_canary_code_only_through_the_registry_and_the_spec() -> None:
    import ast

    import sentinel.canary.catalog as module

    tree = ast.parse(Path(module.__file__).read_text())
    canary = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sentinel.canary")
    }
    assert canary == {"sentinel.canary.kinds", "sentinel.canary.spec"}


def test_catalog_module_does_no_network_or_event_loop_io() -> None:
    import ast

    import sentinel.canary.catalog as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert not imported & {"httpx", "asyncio", "grpc", "aiohttp", "socket"}


def test_image_symlink_out_of_the_catalog_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ASSET, outside / "secret.png")
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    write_catalog(
        catalog,
        {"t.yaml": text_spec(), "m.yaml": multimodal_spec(image="assets/link.png")},
    )
    (catalog / "assets" / "link.png").symlink_to(outside / "secret.png")
    with pytest.raises(CatalogError, match=r"m\.yaml: image: .*resolves outside the catalog"):
        load_catalog(catalog)


def test_image_symlink_inside_the_catalog_is_accepted(tmp_path: Path) -> None:
    write_catalog(
        tmp_path, {"t.yaml": text_spec(), "m.yaml": multimodal_spec(image="assets/link.png")}
    )
    (tmp_path / "assets" / "link.png").symlink_to(tmp_path / "assets" / "canary.png")
    assert load_catalog(tmp_path).get("multimodal").image == ASSET.read_bytes()
