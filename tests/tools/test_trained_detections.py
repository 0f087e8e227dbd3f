"""The trained set's detection decoders (accel_codegen/tools/trained_models.py) on outputs
written by hand: YOLOv8's and YOLOX's decodings share one threshold + NMS step, so both keep
the best of two overlapping boxes and a box apart, and only YOLOv8's answers carry a class."""
import types

import numpy as np

from accel_codegen.tools import trained_models as tm


def test_yolov8_keeps_the_best_of_overlapping_boxes_with_its_class():
    # [N, 4 + classes, L]: centre x, y, width, height, then 2 class scores per position
    pred = np.array([[[50, 52, 200], [50, 50, 200], [20, 20, 40], [20, 20, 40],
                      [0.9, 0.1, 0.05], [0.1, 0.8, 0.6]]], np.float32)
    (found,) = tm.yolov8_detections([pred], None)
    assert found == ((40, 40, 60, 60, 0), (180, 180, 220, 220, 1))
    (none,) = tm.yolov8_detections([pred], None, score_thresh=0.95)
    assert none == ()


def test_yolox_keeps_the_best_of_overlapping_boxes():
    model = types.SimpleNamespace(input_shapes=[(1, 3, 32, 32)])
    # 16 + 4 + 1 positions (strides 8, 16, 32 on 32 x 32); columns: x, y offsets, log w,
    # log h, objectness, 1 class
    pred = np.zeros((1, 21, 6), np.float32)
    pred[0, 0] = [0.5, 0.5, 0.0, 0.0, 0.9, 0.9]   # centre (4, 4), 8 x 8
    pred[0, 1] = [-0.45, 0.5, 0.0, 0.0, 0.8, 0.8]  # centre (4.4, 4): overlaps the first
    pred[0, 20] = [0.5, 0.5, 0.0, 0.0, 0.7, 0.7]   # stride 32: centre (16, 16), 32 x 32
    (found,) = tm.yolox_detections([pred], model)
    assert found == ((0, 0, 8, 8), (0, 0, 32, 32))
