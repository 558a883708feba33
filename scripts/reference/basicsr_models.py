"""BasicSR's ESRGAN pieces, written out from their published definitions
(BasicSR is not packaged for Debian): VGGStyleDiscriminator
(basicsr/archs/discriminator_arch.py), the perceptual feature extractor
(basicsr/archs/vgg_arch.py VGGFeatureExtractor with vgg19, use_input_norm,
no range_norm, a single layer), the vanilla GANLoss (basicsr/losses) and
ESRGANModel.optimize_parameters (basicsr/models/esrgan_model.py).

Shared by gan_ref.py, whose outputs headroom's parity tests check.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class VGGStyleDiscriminator(nn.Module):
    """Conv + BN + LeakyReLU(0.2) stages, channels nf, 2nf, 4nf, 8nf, 8nf, each
    halving the size; linear head to one logit. input_size 128 or 256."""

    def __init__(self, num_in_ch, num_feat, input_size=128):
        super().__init__()
        assert input_size in (128, 256)
        self.input_size = input_size
        nf = num_feat
        self.conv0_0 = nn.Conv2d(num_in_ch, nf, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(nf, nf, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(nf, affine=True)
        stages = 6 if input_size == 256 else 5
        chans = [nf, nf * 2, nf * 4, nf * 8, nf * 8, nf * 8]
        for k in range(1, stages):
            cin, cout = chans[k - 1], chans[k]
            setattr(self, f"conv{k}_0", nn.Conv2d(cin, cout, 3, 1, 1, bias=False))
            setattr(self, f"bn{k}_0", nn.BatchNorm2d(cout, affine=True))
            setattr(self, f"conv{k}_1", nn.Conv2d(cout, cout, 4, 2, 1, bias=False))
            setattr(self, f"bn{k}_1", nn.BatchNorm2d(cout, affine=True))
        self.stages = stages
        self.linear1 = nn.Linear(nf * 8 * 4 * 4, 100)
        self.linear2 = nn.Linear(100, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        assert x.size(2) == self.input_size
        feat = self.lrelu(self.conv0_0(x))
        feat = self.lrelu(self.bn0_1(self.conv0_1(feat)))
        for k in range(1, self.stages):
            feat = self.lrelu(getattr(self, f"bn{k}_0")(getattr(self, f"conv{k}_0")(feat)))
            feat = self.lrelu(getattr(self, f"bn{k}_1")(getattr(self, f"conv{k}_1")(feat)))
        feat = feat.view(feat.size(0), -1)
        feat = self.lrelu(self.linear1(feat))
        return self.linear2(feat)


IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
CONV5_4 = 34


class VGG19Conv54(nn.Module):
    """BasicSR's VGGFeatureExtractor(['conv5_4'], 'vgg19', use_input_norm=True,
    range_norm=False): normalize by ImageNet statistics, then torchvision's
    vgg19().features up to conv5_4 (index 34), before its ReLU. Its keys are
    torchvision's: features.{i}.weight/bias."""

    def __init__(self):
        super().__init__()
        self.features = torchvision.models.vgg19().features[: CONV5_4 + 1]
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x):
        return self.features((x - self.mean) / self.std)


def gan_loss(x, target_is_real, is_disc, loss_weight):
    """GANLoss(gan_type='vanilla', real_label_val=1, fake_label_val=0):
    BCEWithLogits against a constant target; the weight applies to the
    generator's loss only."""
    target = torch.full_like(x, 1.0 if target_is_real else 0.0)
    loss = F.binary_cross_entropy_with_logits(x, target)
    return loss if is_disc else loss * loss_weight


# ESRGAN's x4 training configuration (options/train/ESRGAN/train_ESRGAN_x4.yml).
PIXEL_WEIGHT = 1e-2
PERCEPTUAL_WEIGHT = 1.0
GAN_WEIGHT = 5e-3
ADAM = dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0)


def generator_loss(net_g, net_d, vgg, lq, gt):
    """ESRGANModel's generator objective (net_d frozen): pixel L1, perceptual
    L1 on conv5_4 features, relativistic GAN loss. Returns (total, parts, output)."""
    output = net_g(lq)
    l_pix = PIXEL_WEIGHT * F.l1_loss(output, gt)
    parts = dict(pix=l_pix)
    total = l_pix
    if vgg is not None:
        l_percep = PERCEPTUAL_WEIGHT * F.l1_loss(vgg(output), vgg(gt.detach()))
        parts["percep"] = l_percep
        total = total + l_percep
    real_d_pred = net_d(gt).detach()
    fake_g_pred = net_d(output)
    l_g_real = gan_loss(real_d_pred - torch.mean(fake_g_pred), False, False, GAN_WEIGHT)
    l_g_fake = gan_loss(fake_g_pred - torch.mean(real_d_pred), True, False, GAN_WEIGHT)
    l_g_gan = (l_g_real + l_g_fake) / 2
    parts["gan"] = l_g_gan
    return total + l_g_gan, parts, output


def discriminator_backward(net_d, output, gt):
    """ESRGANModel's discriminator step, as BasicSR runs it: three
    forwards, two backwards. Returns (l_d_real, l_d_fake)."""
    fake_d_pred = net_d(output).detach()
    real_d_pred = net_d(gt)
    l_d_real = gan_loss(real_d_pred - torch.mean(fake_d_pred), True, True, 1) * 0.5
    l_d_real.backward()
    fake_d_pred = net_d(output.detach())
    l_d_fake = gan_loss(fake_d_pred - torch.mean(real_d_pred.detach()), False, True, 1) * 0.5
    l_d_fake.backward()
    return l_d_real, l_d_fake
