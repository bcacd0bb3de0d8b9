"""One door for a run (docs/architecture.md): the session's record (app/run/record.py) is the only module that
creates a run folder or writes config.yaml / status.json, a run's config is resolved once, and each fact has one
home (the dtype table, the option -> config key table, generation). Read from the code (the AST), so a second
writer or a second table fails here the day it is added."""

import ast
import json
from pathlib import Path

import pytest
from repo_paths import ROOT

APP = ROOT / "app"
SESSION = APP / "train" / "running" / "session.py"
RECORD = APP / "run" / "record.py"
MODULES = sorted(APP.rglob("*.py"))
DEFINERS = (APP / "run" / "newrun.py", APP / "run" / "store.py")  # where the writers are defined


def _calls(path: Path):
    """(called name, call node) for every call in a module: `rundir.write_status(...)` -> 'write_status'."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name:
                yield name, node


def _names(node) -> set[str]:
    return {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(node)
            if isinstance(n, (ast.Attribute, ast.Name))}


def _writers(path: Path) -> list[str]:
    """What a module does to a run's records: create a run folder, write status.json, write config.yaml."""
    out = []
    for name, node in _calls(path):
        if name in ("create_run_dir", "new_run_dir"):
            out.append(f"creates a run folder ({name})")
        elif name == "write_status":
            out.append("writes status.json")
        elif name in ("write_atomic", "write_text", "write_bytes", "open"):
            # the path is the first argument, or what .write_text() is called on
            target = node.func.value if name.startswith("write_") and name != "write_atomic" else (
                node.args[0] if node.args else None)
            names = _names(target) if target is not None else set()
            if {"CONFIG", "STATUS"} & names:
                out.append(f"writes {'config.yaml' if 'CONFIG' in names else 'status.json'} ({name})")
    return out


def test_only_the_session_opens_a_run_and_writes_its_records():
    found = {str(p.relative_to(ROOT)): w for p in MODULES
             if p not in DEFINERS and (w := _writers(p))}  # they define the functions the session calls
    assert set(found) == {"app/run/record.py"}, found
    assert {"creates a run folder (create_run_dir)", "writes status.json", "writes config.yaml (write_atomic)"} <= set(
        found["app/run/record.py"])
    inside = [name for p in DEFINERS for name, _ in _calls(p) if name in ("create_run_dir", "write_status")]
    assert inside == []  # the run folder's own modules open nothing and record nothing on their own


def test_the_checker_sees_a_second_writer(tmp_path):
    """The AST check is not blind: a module that writes status.json or config.yaml, or makes a run folder, is seen."""
    bad = tmp_path / "bad.py"
    bad.write_text("from app import rundir\n"
                   "def f(d):\n"
                   "    rundir.write_status(d, 'running')\n"
                   "    rundir.write_atomic(d / rundir.CONFIG, 'x')\n"
                   "    (d / rundir.STATUS).write_text('{}')\n"
                   "    return rundir.create_run_dir('runs', None, 'sft', 'arith')\n")
    assert _writers(bad) == ["writes status.json", "writes config.yaml (write_atomic)", "writes status.json "
                             "(write_text)", "creates a run folder (create_run_dir)"]


def test_one_dtype_table_one_option_table_one_generation():
    dtype_tables, flag_literals = [], []
    for p in MODULES:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and {"bf16", "fp16", "fp32"} <= {
                    k.value for k in node.keys if isinstance(k, ast.Constant)}:
                dtype_tables.append(str(p.relative_to(ROOT)))
            # a map with `qlora-app train` option names in it: a second option -> key (or -> widget) table
            if isinstance(node, ast.Dict) and any(
                    isinstance(v, ast.Constant) and v.value in ("--prompt-field", "--dataset-config", "--max-steps")
                    for v in [*node.keys, *node.values]):
                flag_literals.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert dtype_tables == ["app/host/machine.py"]
    assert flag_literals == [], flag_literals
    compare = ast.parse((APP / "eval" / "compare.py").read_text())
    defined = {n.name for n in ast.walk(compare) if isinstance(n, ast.FunctionDef)}
    assert not {"generate", "decoding", "format_prompt", "prompt_room"} & defined


def test_the_cli_and_the_form_take_their_options_from_the_one_table():
    """Every option of the table is an option of `qlora-app train` with that name, and every widget of the table is
    a widget of the Train form (the form builds its command line from the same table)."""
    import typer.main

    from app.cli.main import app
    from app.config.flags import FLAGS, WIDGETS
    from app.ui import handlers as h

    command = next(c for c in typer.main.get_command(app).commands.values() if c.name == "train")
    options = {p.name: p.opts for p in command.params}
    for flag in FLAGS:
        if flag.cli:
            assert flag.cli in options.get(flag.param, ()), flag.key
    form = h.form_defaults(None)
    assert set(WIDGETS) <= set(form)
    assert not hasattr(h, "FORM")
    preset, flags, sets, argv = h.form_to_cli({**form, "max_steps": 7, "dataset": "arith", "lora_r": "8"}, "runs")
    assert flags["training"]["max_steps"] == 7 and flags["data"]["dataset"] == "arith" and "lora.r=8" in sets
    assert argv[argv.index("--max-steps") + 1] == "7"


def test_modules_and_functions_stay_small():
    long_modules = [f"{p.relative_to(ROOT)}: {n}" for p in MODULES if (n := len(p.read_text().splitlines())) > 400]
    long_functions = []
    for p in MODULES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long_functions.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long_modules == [] and long_functions == [], (long_modules, long_functions)


def test_a_run_resolves_its_config_once(monkeypatch, tmp_path):
    """The session's open and plan steps (everything before the folder is made) resolve the request exactly once;
    nothing after the plan resolves again (the builders read the plan: no other module calls resolve)."""
    import app.config.resolve
    import app.train.planning.plan
    from app.config.build import build_config
    from app.train.running.session import Session

    calls = []
    real = app.config.resolve.resolve

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(app.train.planning.plan, "resolve", counting)
    monkeypatch.setattr(app.config.resolve, "resolve", counting)
    cfg = build_config({"model": {"name_or_path": "arith-base"}, "data": {"dataset": "arith"},
                        "output_dir": str(tmp_path)}, None, ["runtime.device=cpu", "training.max_steps=1"])
    s = Session(cfg, progress=False)
    s.open()
    s.plan_run()
    assert len(calls) == 1 and s.plan.cfg.lora.r == 16 and not any(tmp_path.iterdir())
    resolvers = sorted({str(p.relative_to(ROOT)) for p in MODULES if APP / "train" in p.parents
                        for _, node in _calls(p) if isinstance(node.func, ast.Name) and node.func.id == "resolve"})
    assert resolvers == ["app/train/planning/plan.py"]


@pytest.mark.parametrize("where", ["app/train/running/session.py", "app/model/generation.py", "app/host/machine.py"])
def test_modules_say_what_they_own(where):
    doc = ast.get_docstring(ast.parse((ROOT / where).read_text())) or ""
    assert "Owns" in doc and ("Must not" in doc or "must not" in doc)


@pytest.fixture(scope="module")
def vision_moe(tmp_path_factory, tiny_vlm):
    """A vision mixture-of-experts model's folder as a dry run plans it: Qwen3-VL-MoE's config.json (a tiny shape:
    the language model's experts fused, a vision tower) beside a tokenizer; no weights, which a dry run never reads."""
    import shutil

    from transformers import AutoConfig

    out = tmp_path_factory.mktemp("vision-moe")
    for f in tiny_vlm.iterdir():
        if "token" in f.name or f.name == "chat_template.jinja":
            shutil.copy(f, out / f.name)
    text = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                vocab_size=512, rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  deepstack_visual_indexes=[0])
    AutoConfig.for_model("qwen3_vl_moe", text_config=text, vision_config=vision).save_pretrained(out)
    return out


def test_a_plan_reads_config_json_once_and_builds_the_meta_model_once(monkeypatch, tmp_path, vision_moe):
    """A dry run of a vision MoE on pictures for a 24 GB card (its plan and each card's): the images, the experts, the
    class and family, the context, the memory estimates and the precision lines all ask about the model; config.json
    is parsed once (our reader and transformers' counted) and the model built on the meta device once."""
    import transformers
    from conftest import cli_here

    import app.model.files
    import app.model.shape

    parsed, built = [], []
    read, meta = app.model.shape.read_config, app.model.shape.meta_model
    from_json = transformers.PretrainedConfig._dict_from_json_file.__func__

    def reading(name):
        config = read(name)
        parsed.extend(["ours"] if config is not None else [])
        return config

    def json_file(cls, path):
        parsed.extend(["transformers"] if str(path).endswith("config.json") else [])
        return from_json(cls, path)

    def building(*a, **k):
        built.append(1)
        return meta(*a, **k)

    for module in (app.model.shape, app.model.files):
        monkeypatch.setattr(module, "read_config", reading)
    for module in (app.model.shape, app.model.files):
        monkeypatch.setattr(module, "meta_model", building)
    monkeypatch.setattr(transformers.PretrainedConfig, "_dict_from_json_file", classmethod(json_file))
    r = cli_here("train", "--model", vision_moe, "--dataset", "shapes", "--method", "sft", "--dry-run",
                 "--gpu-memory", "24", "--output-dir", tmp_path / "runs", cwd=tmp_path)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "images: column" in said and "experts: 4 per MoE layer" in said  # both asked about the model
    assert "per card: 8 GB fits" in said  # the plans of each card too
    assert parsed == ["ours"] and len(built) == 1, (parsed, built)


@pytest.mark.slow
def test_a_real_run_on_pictures_reads_its_model_files_once(monkeypatch, tmp_path):
    """A real run of the shipped vision model (train, then its proof): config.json is parsed once by us, the model
    built on the meta device once and the processor loaded once, all by the plan (app.model.files.ModelFiles); the
    training load and the proof's pair read the plan's (the transformers config, the processor, the modules kept
    16-bit), never again. transformers' own parse of config.json, counted too, happens once: inside the processor's
    load, where its tokenizer finds its class (AutoProcessor passes no config down)."""
    import traceback

    import transformers
    from conftest import cli_here

    import app.model.files
    import app.model.load
    import app.model.shape
    import app.model.vision
    from app.config.builtin import VISION_MODEL, builtin_model_path
    from app.run import layout, store

    counted: dict[str, list] = {"ours": [], "transformers": [], "meta": [], "processor": []}
    read, meta, proc = app.model.shape.read_config, app.model.shape.meta_model, app.model.vision.load_processor
    from_json = transformers.PretrainedConfig._dict_from_json_file.__func__

    def where() -> str:
        return " <- ".join(f"{f.name}" for f in traceback.extract_stack()[-12:-2])

    def reading(name):
        config = read(name)
        counted["ours"] += [where()] if config is not None else []
        return config

    def json_file(cls, path):
        counted["transformers"] += [where()] if str(path).endswith("config.json") else []
        return from_json(cls, path)

    def building(*a, **k):
        counted["meta"].append(where())
        return meta(*a, **k)

    def processing(*a, **k):
        counted["processor"].append(where())
        return proc(*a, **k)

    for module in (app.model.shape, app.model.files):
        monkeypatch.setattr(module, "read_config", reading)
    for module in (app.model.shape, app.model.files, app.model.load):
        monkeypatch.setattr(module, "meta_model", building)
    for module in (app.model.vision, app.model.files, app.model.load):
        monkeypatch.setattr(module, "load_processor", processing)
    monkeypatch.setattr(transformers.PretrainedConfig, "_dict_from_json_file", classmethod(json_file))
    r = cli_here("train", "--model", str(builtin_model_path(VISION_MODEL)), "--dataset", "shapes", "--method", "sft",
                 "--max-steps", "1", "--set", "training.proof_rows=4", "--set", "training.eval_every=0",
                 "--local-only", "--no-progress", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    st = store.read_status(tmp_path / "run")
    assert st["status"] == layout.FINISHED and st[layout.VISION]["kept_16bit"]
    assert (tmp_path / "run" / layout.COMPARE_JSON).is_file()  # the proof ran, on the plan's files
    assert [len(counted[k]) for k in ("ours", "meta", "processor")] == [1, 1, 1], counted
    assert len(counted["transformers"]) == 1 and "load_processor" in counted["transformers"][0], counted


@pytest.mark.slow
def test_a_distilled_run_and_its_proof_read_each_models_files_once(monkeypatch, tmp_path):
    """A real distillation run (the demo's teacher, one step, then its proof with the teacher's column): the student's
    and the teacher's config.json are each read once, by the plan; the training load, the teacher's load and the
    proof's pair and teacher read the plan's (app.model.files.ModelFiles), so transformers parses neither again. The
    one parse left is PEFT's own when it saves the adapter (it compares the base's vocabulary with the model's)."""
    import traceback

    import transformers
    from conftest import cli_here

    import app.model.files
    import app.model.shape
    import app.model.teacher
    from app.run import layout

    ours: list[str] = []
    theirs: list[tuple[str, str]] = []
    read = app.model.shape.read_config
    from_json = transformers.PretrainedConfig._dict_from_json_file.__func__

    def reading(name):
        config = read(name)
        ours.extend([Path(str(name)).name] if config is not None else [])
        return config

    def json_file(cls, path):
        if str(path).endswith("config.json"):
            theirs.append((Path(path).parent.name, " ".join(f.name for f in traceback.extract_stack())))
        return from_json(cls, path)

    for module in (app.model.shape, app.model.files, app.model.teacher):
        monkeypatch.setattr(module, "read_config", reading)
    monkeypatch.setattr(transformers.PretrainedConfig, "_dict_from_json_file", classmethod(json_file))
    r = cli_here("train", "--preset", "demo-distill", "--max-steps", "1", "--set", "training.proof_rows=4",
                 "--set", "training.eval_every=0", "--local-only", "--no-progress", "--run-dir", tmp_path / "run",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    proof = json.loads((tmp_path / "run" / layout.COMPARE_JSON).read_text())
    assert all(row.get("teacher") for row in proof["rows"])  # the proof asked the teacher
    assert sorted(ours) == ["arith-base", "arith-teacher"], ours
    assert theirs and all(model == "arith-base" and "save_pretrained" in stack for model, stack in theirs), theirs


# ------------------------------------------------------------------------------------------- one way to ask a model

ASKING = APP / "ask" / "asking.py"
# The paths a request can take, each called by the dispatcher only (their own modules define them)
PATH_CALLS = {"generate_with_images", "generate_one", "run_tool_loop", "text_logprobs", "image_logprobs"}
ASKERS = ("app/eval/compare.py", "app/train/running/heldout_eval.py", "app/eval/chat.py", "app/serve/engine.py")


def _at(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _called(path: Path, names: set[str]) -> list[str]:
    return [f"{_at(path)}:{node.lineno} {name}" for name, node in _calls(path) if name in names]


def _system_turns_made(path: Path) -> list[str]:
    """Each place a module writes a system turn of a given prompt ({"role": "system", "content": <a name>}): the
    system-prompt rule (a constant content, a demo's or a test's data, is not a rule)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            kv = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
            role, content = kv.get("role"), kv.get("content")
            if isinstance(role, ast.Constant) and role.value == "system" and content is not None \
                    and not isinstance(content, ast.Constant):
                out.append(f"{_at(path)}:{node.lineno}")
    return out


def test_one_dispatcher_asks_a_model():
    """compare, the held-out points, chat, the API server and the preference log-probs ask through
    app/ask/asking.py: its Asker alone calls the paths (pictures, a tool loop, text, log-probs), holds the one
    refusal of pictures for a model without a processor, and every asker uses it."""
    strays = [c for p in MODULES if p != ASKING for c in _called(p, PATH_CALLS)]
    assert not strays, strays
    assert {c.split()[-1] for c in _called(ASKING, PATH_CALLS)} == PATH_CALLS  # the scan sees the dispatcher's calls
    for path in ASKERS:
        assert "Asker" in {name for name, _ in _calls(ROOT / path)}, f"{path} asks a model without the Asker"
    refusals = [str(p.relative_to(ROOT)) for p in MODULES if "reads no images" in p.read_text()]
    assert refusals == ["app/ask/asking.py"], refusals


# Where generation may be called: the dispatcher, the module that defines it (torch's generate, once), and GRPO's
# training sampler (TRL's generation phase: training samples, not a model asked)
GENERATION_HOMES = {ASKING, APP / "model" / "generation.py", APP / "train" / "methods" / "sampler.py"}


def test_nothing_but_the_asker_calls_generation():
    """generate / generate_ids (and a model's own .generate) are called by app/ask/asking.py alone: compare, chat,
    the API server, the held-out points, pairs and off-policy distillation's teacher ask through the Asker, so a
    picture, a run's tools or its prompt rule cannot be skipped by a caller of its own."""
    strays = [c for p in MODULES if p not in GENERATION_HOMES for c in _called(p, {"generate", "generate_ids"})]
    assert not strays, strays
    assert _called(ASKING, {"generate", "generate_ids"})  # the scan sees the dispatcher's own calls
    for path in ("app/synth/pairs.py", "app/train/methods/distill.py"):
        assert "Asker" in {name for name, _ in _calls(ROOT / path)}, f"{path} asks a model without the Asker"


def test_the_api_server_asks_without_the_evaluation_package():
    """serve asks through app/ask like every other caller: it imports nothing of app/eval (compare, scoring)."""
    found = [f"{_at(p)}:{n.lineno} {n.module}" for p in (APP / "serve").glob("*.py")
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("app.eval")]
    assert not found, found
    assert any(isinstance(n, ast.ImportFrom) and n.module == "app.ask.asking"
               for n in ast.walk(ast.parse((APP / "serve" / "engine.py").read_text())))


def test_one_system_prompt_rule_at_ask_time():
    """The run's system prompt is put first by app/model/pair.system_first (asking) and merged into a row's own by
    app/data/turns.with_system (training rows, which held-out rows keep); nowhere else; the exported template
    renders its own default (app/export/template.py); the demo's base builders write their pretraining data."""
    made = [w for p in MODULES if not p.name.startswith("build_") for w in _system_turns_made(p)]
    homes = ("app/model/pair.py:", "app/data/turns.py:", "app/export/template.py:")
    assert made and all(w.startswith(homes) for w in made), made
    assert any(w.startswith("app/model/pair.py:") for w in made)


def test_the_dispatcher_check_sees_a_second_path(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from app.model.generation import generate_one\n"
                   "def f(m, t):\n    return generate_one(m, t, [1], 2)\n"
                   "x = {'role': 'system', 'content': prompt}\n")
    assert [c.split()[-1] for c in _called(src, PATH_CALLS)] == ["generate_one"]
    assert len(_system_turns_made(src)) == 1
