"""scripts/check_readme.py: README blocks run in order in one session, skip markers need a reason, a failure stops."""

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_readme", REPO / "scripts" / "check_readme.py")
check_readme = importlib.util.module_from_spec(spec)
sys.modules["check_readme"] = check_readme  # dataclasses look their module up there
spec.loader.exec_module(check_readme)


def write(tmp_path: Path, text: str) -> Path:
    readme = tmp_path / "README.md"
    readme.write_text(text)
    return readme


def test_blocks_in_order_with_skip_reasons(tmp_path):
    readme = write(
        tmp_path,
        "# t\n\n```bash\necho one\n```\n\n<!-- readme-check: skip (long: 1 h) -->\n"
        "```bash\nsleep 3600\n```\n\n```python\nprint(2)\n```\n\n```text\nnot code\n```\n",
    )
    blocks = check_readme.read_blocks(readme)
    assert [(b.language, b.line, b.code, b.skip_reason) for b in blocks] == [
        ("bash", 3, "echo one\n", None),
        ("bash", 8, "sleep 3600\n", "long: 1 h"),
        ("python", 12, "print(2)\n", None),
    ]


def test_skip_marker_needs_a_reason(tmp_path):
    readme = write(tmp_path, "<!-- readme-check: skip -->\n```bash\necho x\n```\n")
    assert check_readme.main(["--readme", str(readme), "--list"]) == 2


def test_state_carries_across_blocks_and_a_failure_stops(tmp_path, capfd):
    marker = tmp_path / "reached"
    ok = write(tmp_path, f"```bash\nVALUE=41\n```\n```bash\ntest $((VALUE + 1)) = 42 && touch {marker}\n```\n")
    assert check_readme.main(["--readme", str(ok)]) == 0 and marker.exists()
    marker.unlink()
    failing = write(tmp_path, f"```bash\nfalse\n```\n```bash\ntouch {marker}\n```\n")
    assert check_readme.main(["--readme", str(failing)]) == 1
    assert not marker.exists()  # the block after the failing one never ran
    assert "=== README.md:1 (bash)" in capfd.readouterr().err


def test_a_block_that_overwrites_a_committed_file_fails(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "figure.png").write_text("committed")
    readme = write(tmp_path, "```bash\necho new > figure.png\n```\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    assert check_readme.main(["--readme", str(readme)]) == 1
    assert check_readme.changed_tracked_files(tmp_path) == ["figure.png"]
