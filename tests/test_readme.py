"""The README's first screen stays true: it names every special node the demo's tour names."""

from pathlib import Path

from sim.management.commands.demo_fleet import TOUR

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_first_screen_names_the_demos_special_nodes():
    first_screen = README.read_text().split("## Where things are")[0]
    missing = [spec.node_id for spec, _shows, _command in TOUR if str(spec.node_id) not in first_screen]
    assert missing == []


def test_the_first_screen_has_the_two_commands():
    first_screen = README.read_text().split("## Where things are")[0]
    assert "make run" in first_screen and "make test" in first_screen
