"""Architectures the zoo does not have, written here from torch.nn only (torchvision is not
available): ResNet-34, a RegNetY-400MF-like network, MobileNet-v2 and an EfficientNet-B0-like
network, each initialised as the zoo initialises its models (He weights, batch-norm statistics
measured on a batch of N(0, 1) inputs: ``models.build_realistic``). Issue #13 asks that int8
claims hold on such networks too; ``examples/accuracy_vs_ort.py --unseen`` measures them.

Each function returns (model, (x,)) as the zoo's do.
"""
from __future__ import annotations

from torch import nn


def _conv_bn(cin, cout, kernel, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return layers + ([act()] if act is not None else [])


class _Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, stride, act=nn.ReLU),
                                  *_conv_bn(cout, cout, 3))
        self.short = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) \
            if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.short(x))


class ResNet34(nn.Module):
    """He et al., 2016: basic blocks [3, 4, 6, 3]."""

    def __init__(self, classes=1000):
        super().__init__()
        layers = [*_conv_bn(3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for width, depth, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(depth):
                layers.append(_Basic(cin, width, stride if i == 0 else 1))
                cin = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x):
        return self.head(self.features(x))


class _SqueezeExcite(nn.Module):
    def __init__(self, channels, squeeze, act):
        super().__init__()
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, squeeze, 1),
                                  act(), nn.Conv2d(squeeze, channels, 1), nn.Sigmoid())

    def forward(self, x):
        return x * self.gate(x)


class _RegNetY(nn.Module):
    """Radosavovic et al., 2020: 1x1, grouped 3x3 (group width 8), squeeze-excite, 1x1."""

    def __init__(self, cin, cout, stride, group_width=8):
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(cin, cout, 1, act=nn.ReLU),
            *_conv_bn(cout, cout, 3, stride, groups=cout // group_width, act=nn.ReLU),
            _SqueezeExcite(cout, max(1, cin // 4), nn.ReLU), *_conv_bn(cout, cout, 1))
        self.short = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) \
            if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.short(x))


class RegNetY400MF(nn.Module):
    """RegNetY-400MF's widths [48, 104, 208, 440] and depths [1, 3, 6, 6]."""

    def __init__(self, classes=1000):
        super().__init__()
        layers = _conv_bn(3, 32, 3, 2, act=nn.ReLU)
        cin = 32
        for width, depth in ((48, 1), (104, 3), (208, 6), (440, 6)):
            for i in range(depth):
                layers.append(_RegNetY(cin, width, 2 if i == 0 else 1))
                cin = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x):
        return self.head(self.features(x))


class _InvertedResidual(nn.Module):
    """MobileNet-v2's (ReLU6) and EfficientNet's MBConv (SiLU, squeeze-excite) block."""

    def __init__(self, cin, cout, stride, expand, kernel=3, act=nn.ReLU6, se=False):
        super().__init__()
        hidden = cin * expand
        layers = _conv_bn(cin, hidden, 1, act=act) if expand != 1 else []
        layers += _conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=act)
        if se:
            layers.append(_SqueezeExcite(hidden, max(1, cin // 4), act))
        layers += _conv_bn(hidden, cout, 1)
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """Sandler et al., 2018, width 1.0."""

    def __init__(self, classes=1000):
        super().__init__()
        layers = _conv_bn(3, 32, 3, 2, act=nn.ReLU6)
        cin = 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += _conv_bn(cin, 1280, 1, act=nn.ReLU6)
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes))

    def forward(self, x):
        return self.head(self.features(x))


class EfficientNetB0(nn.Module):
    """Tan and Le, 2019: B0's MBConv table, SiLU, squeeze-excite (no stochastic depth)."""

    def __init__(self, classes=1000):
        super().__init__()
        layers = _conv_bn(3, 32, 3, 2, act=nn.SiLU)
        cin = 32
        for t, k, c, n, s in ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2),
                              (6, 3, 80, 3, 2), (6, 5, 112, 3, 1), (6, 5, 192, 4, 2),
                              (6, 3, 320, 1, 1)):
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t, k, nn.SiLU, True))
                cin = c
        layers += _conv_bn(cin, 1280, 1, act=nn.SiLU)
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes))

    def forward(self, x):
        return self.head(self.features(x))


UNSEEN = {"resnet34": ResNet34, "regnety_400mf": RegNetY400MF, "mobilenet_v2_tnn": MobileNetV2,
          "efficientnet_b0_tnn": EfficientNetB0}


def get_unseen(name: str, seed: int = 0):
    """(model, (x,)) of an architecture above, initialised as the zoo's models are."""
    from accel_codegen.tools.models import build_realistic

    return build_realistic(UNSEEN[name], (3, 224, 224), seed=seed)
