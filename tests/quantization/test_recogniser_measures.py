"""examples/recogniser_int8.py's finer task measures: the characters' edit distance to the
reference string and the time steps whose class is the reference's. Exact strings count a
line lost for one dropped space, so on 12 lines they rank two int8 builds coarsely (session
14: ours 4/12 exact against ONNX Runtime's 6/12 with 9 edits against 8 and 453/480 steps
against 444/480); these see every decision. No model is needed: the recogniser's outputs are
[1, T, classes] probabilities, made up here."""
import numpy as np
import pytest

from conftest import load_example


@pytest.fixture(scope="module")
def rec():
    return load_example("recogniser_int8")


@pytest.mark.parametrize("a, b, distance", [
    ("", "", 0), ("abc", "abc", 0), ("Quick brown fox", "Quick brown fox ", 1),
    (" Paddle ONNX export", "Paddle ONNX export", 1), ("int8weights", "int8 weights ", 2),
    ("PP-0CRv4 text ", "PP-OCRv4 text ", 1), ("kitten", "sitting", 3), ("", "abc", 3),
    ("flaw", "lawn", 2)])
def test_edit_distance(rec, a, b, distance):
    assert rec.edit_distance(a, b) == distance
    assert rec.edit_distance(b, a) == distance


def _probabilities(classes_per_step, classes=5):
    """One output of the recogniser's form: [1, T, classes], each step's class at 0.9."""
    p = np.full((1, len(classes_per_step), classes), 0.1 / (classes - 1), np.float32)
    p[0, np.arange(len(classes_per_step)), classes_per_step] = 0.9
    return p


def test_step_agreement_counts_every_step_of_every_line(rec):
    reference = [[_probabilities([0, 1, 1, 0, 4])], [_probabilities([2, 0, 3, 0, 0])]]
    # line 1 loses its last step's class (a trailing space: 4 is the space), line 2 one
    # inner step; CTC's collapse would hide neither count
    outputs = [[_probabilities([0, 1, 1, 0, 0])], [_probabilities([2, 2, 3, 0, 0])]]
    assert rec.step_agreement(outputs, reference) == (8, 10)
    assert rec.step_agreement(reference, reference) == (10, 10)
