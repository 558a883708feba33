#!/usr/bin/python3
"""Reference data for ESRGAN's GAN training (zoo/gan_*_test.go), produced by
PyTorch 1.13 and torchvision. Run with Debian's interpreter:

    /usr/bin/python3 scripts/reference/gan_ref.py [file ...]

It writes into zoo/testdata/ (only the named files, by their names below
without extension, when any are given):

  gan_architectures.json   state_dict keys (dtype, shape, in order) and
                           parameter counts of BasicSR's
                           VGGStyleDiscriminator (128 and 256 inputs, 64
                           features) and of torchvision's vgg19 `features`
  vggdisc.safetensors      one training step of a small discriminator
                           (num_feat 4, 128x128 inputs, L1 loss), as
                           zoo_ref.py's cases
  vgg19_conv54.safetensors one training step of the perceptual feature
                           extractor (ImageNet normalization, vgg19
                           features to conv5_4 before its ReLU) on 32x32
                           inputs, L1 loss against a target; the input is
                           the first hash draw with no ReLU input and no
                           output within 4x float32's error of its kink
                           (zoo_ref.kinks): at one, an engine summing in
                           another order moved gradients by 1%
  gan_losses.safetensors   the relativistic GAN losses of the generator and
                           the discriminator, and the perceptual loss, with
                           the gradients of their inputs
  gan_step.safetensors     one ESRGANModel.optimize_parameters (a generator
                           step with the discriminator frozen, then a
                           discriminator step, each with Adam lr 1e-4,
                           betas (0.9, 0.99)) of a small RRDBNet (nf 8,
                           nb 1, gc 4), the small discriminator and the full
                           vgg19 features: losses, gradients, weights after
                           each optimizer step

Weights are zoo_ref.py's hashinit; tensors are stored whole or sampled as
there (see zoo_ref.py's docstring).
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo_ref  # noqa: E402
from basicsr_models import (ADAM, VGG19Conv54, VGGStyleDiscriminator, discriminator_backward,  # noqa: E402
                            gan_loss, generator_loss, GAN_WEIGHT, PERCEPTUAL_WEIGHT)
from st import save  # noqa: E402
from torch_models import RRDBNet  # noqa: E402

OUT = zoo_ref.OUT
_DT = {torch.float32: "F32", torch.int64: "I64"}


def sd_entries(sd):
    return [[k, _DT[v.dtype], list(v.shape)] for k, v in sd.items()]


def architectures():
    out = {}
    for name, make in {
        "vggdisc128": lambda: VGGStyleDiscriminator(3, 64, 128),
        "vggdisc256": lambda: VGGStyleDiscriminator(3, 64, 256),
    }.items():
        m = make()
        out[name] = dict(num_params=sum(p.numel() for p in m.parameters()), state_dict=sd_entries(m.state_dict()))
    v = torchvision.models.vgg19()
    sd = {k: t for k, t in v.state_dict().items() if k.startswith("features.")}
    out["vgg19_features"] = dict(num_params=sum(t.numel() for t in sd.values()), state_dict=sd_entries(sd))
    for k, a in out.items():
        print(f"{k}: {a['num_params']:,} parameters, {len(a['state_dict'])} entries")
    assert out["vgg19_features"]["num_params"] == 20024384
    return out


def perceptual_gain(vgg):
    """hashinit's weights shrink activations by about 0.58 per layer and its
    biases (scale 0.1) then swamp what the input contributes at conv5_4, so
    the loss would be a difference of nearly equal numbers. Weights are
    doubled and biases divided by 1024 (exact in float32, as the Go test
    does) so that conv5_4 depends on the image."""
    with torch.no_grad():
        for k, p in vgg.named_parameters():
            p.mul_(2.0 if k.endswith(".weight") else 2.0 ** -10)


def uniform01(name, shape):
    """Images in [0, 1)."""
    return zoo_ref.hash_tensor(name, shape, 0.5, 0.5)


def losses():
    t = {}
    real = zoo_ref.hash_input("real_pred", (4, 1), 3.0)
    fake = zoo_ref.hash_input("fake_pred", (4, 1), 3.0)
    t["real_pred"], t["fake_pred"] = real, fake

    # Generator: real predictions are detached.
    f = fake.clone().requires_grad_()
    l_g = (gan_loss(real - torch.mean(f), False, False, GAN_WEIGHT) +
           gan_loss(f - torch.mean(real), True, False, GAN_WEIGHT)) / 2
    l_g.backward()
    t["g_loss"], t["g_grad_fake"] = l_g.detach().reshape(()), f.grad.clone()

    # Discriminator: BasicSR's two backward passes with detached means.
    r = real.clone().requires_grad_()
    f = fake.clone().requires_grad_()
    l_real = gan_loss(r - torch.mean(f.detach()), True, True, 1) * 0.5
    l_fake = gan_loss(f - torch.mean(r.detach()), False, True, 1) * 0.5
    (l_real + l_fake).backward()
    t["d_loss_real"], t["d_loss_fake"] = l_real.detach().reshape(()), l_fake.detach().reshape(())
    t["d_grad_real"], t["d_grad_fake"] = r.grad.clone(), f.grad.clone()

    # Perceptual loss with hashinit vgg19 features.
    torch.manual_seed(0)
    vgg = VGG19Conv54()
    zoo_ref.hash_init(vgg)
    perceptual_gain(vgg)
    out = uniform01("sr", (2, 3, 32, 32)).requires_grad_()
    gt = uniform01("gt", (2, 3, 32, 32))
    l_p = PERCEPTUAL_WEIGHT * F.l1_loss(vgg(out), vgg(gt))
    l_p.backward()
    t["sr"], t["gt"] = out.detach().clone(), gt
    t["percep_loss"], t["percep_grad_sr"] = l_p.detach().reshape(()), out.grad.clone()
    path = os.path.join(OUT, "gan_losses.safetensors")
    save(path, t)
    print(f"gan_losses: G {float(l_g):.6g}, D {float(l_real):.6g} + {float(l_fake):.6g}, perceptual {float(l_p):.6g}")


G_CFG = dict(in_nc=3, out_nc=3, nf=8, nb=1, gc=4)
D_CFG = dict(num_in_ch=3, num_feat=4, input_size=128)


def gan_step():
    t = {}
    meta = dict(g=G_CFG, d=D_CFG, adam=dict(lr=ADAM["lr"], betas=list(ADAM["betas"])), sample_k=zoo_ref.SAMPLE_K)
    torch.manual_seed(0)
    net_g = RRDBNet(G_CFG["in_nc"], G_CFG["out_nc"], G_CFG["nf"], G_CFG["nb"], G_CFG["gc"])
    net_d = VGGStyleDiscriminator(**D_CFG)
    vgg = VGG19Conv54()
    for m in (net_g, net_d, vgg):
        zoo_ref.hash_init(m)
    perceptual_gain(vgg)
    for p in vgg.parameters():
        p.requires_grad = False
    net_g.train()
    net_d.train()
    opt_g = torch.optim.Adam(net_g.parameters(), foreach=False, **ADAM)
    opt_d = torch.optim.Adam(net_d.parameters(), foreach=False, **ADAM)
    lq = uniform01("lq", (2, 3, 32, 32))
    gt = uniform01("gt", (2, 3, 128, 128))
    t["lq"], t["gt"] = lq, gt
    fm = 4096

    # The conditioning of the generator's gradient: the perceptual L1 takes
    # the sign of 65,536 feature differences, a few of them within float32
    # rounding of zero, and each flipped sign moves the gradient coherently
    # through vgg19's backward pass. PyTorch's own float32 gradient is
    # compared with float64's; the Go test allows that much.
    import copy
    g64, d64, v64 = (copy.deepcopy(m).double() for m in (net_g, net_d, vgg))
    for p in d64.parameters():
        p.requires_grad = False
    generator_loss(g64, d64, v64, lq.double(), gt.double())[0].backward()
    cond = 0.0

    # ESRGANModel.optimize_parameters, generator half.
    for p in net_d.parameters():
        p.requires_grad = False
    opt_g.zero_grad()
    total, parts, output = generator_loss(net_g, net_d, vgg, lq, gt)
    total.backward()
    t["g_loss"] = total.detach().reshape(())
    for k, v in parts.items():
        t[f"g_{k}"] = v.detach().reshape(())
    for k, p in net_g.named_parameters():
        zoo_ref.put(t, "g_grad", k, p.grad, fm)
    for (k, p), (_, p64) in zip(net_g.named_parameters(), g64.named_parameters()):
        cond = max(cond, float((p.grad.double() - p64.grad).abs().max() / p64.grad.abs().max()))
    meta["g_grad_f32_error"] = cond
    print(f"gan_step: PyTorch's float32 generator gradient is within {cond:.3g} of float64's")
    opt_g.step()
    for k, p in net_g.named_parameters():
        zoo_ref.put(t, "g_adam", k, p, fm)
    for k, b in net_d.named_buffers():
        t[f"d_buffer_after_g/{k}"] = b.detach().clone()

    # Discriminator half.
    for p in net_d.parameters():
        p.requires_grad = True
    opt_d.zero_grad()
    l_real, l_fake = discriminator_backward(net_d, output, gt)
    t["d_loss"] = (l_real + l_fake).detach().reshape(())
    t["d_loss_real"], t["d_loss_fake"] = l_real.detach().reshape(()), l_fake.detach().reshape(())
    for k, p in net_d.named_parameters():
        zoo_ref.put(t, "d_grad", k, p.grad, fm)
    opt_d.step()
    for k, p in net_d.named_parameters():
        zoo_ref.put(t, "d_adam", k, p, fm)
    meta["g_params"] = [k for k, _ in net_g.named_parameters()]
    meta["d_params"] = [k for k, _ in net_d.named_parameters()]
    path = os.path.join(OUT, "gan_step.safetensors")
    save(path, t, metadata={"case": json.dumps(meta, sort_keys=True)})
    print(f"gan_step: G {float(total):.6g} {dict((k, float(v)) for k, v in parts.items())}, "
          f"D {float(l_real):.6g} + {float(l_fake):.6g}, {os.path.getsize(path):,} bytes")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    want = set(sys.argv[1:])
    known = {"gan_architectures", "vggdisc", "vgg19_conv54", "gan_losses", "gan_step"}
    if want - known:
        raise SystemExit(f"unknown files {sorted(want - known)}; known: {sorted(known)}")

    def wanted(name):
        return not want or name in want

    if wanted("gan_architectures"):
        zoo_ref.write_architectures(os.path.join(OUT, "gan_architectures.json"), architectures())

    if wanted("vggdisc"):
        x = uniform01("input", (2, 3, 128, 128))
        y = zoo_ref.hash_input("target", (2, 1))
        zoo_ref.one_step("vggdisc", lambda: VGGStyleDiscriminator(**D_CFG), x, y, F.l1_loss,
                         dict(model="vggdisc", config=D_CFG), full_max=4096)

    if wanted("vgg19_conv54"):
        y = zoo_ref.hash_input("target", (1, 512, 2, 2))
        x, name = zoo_ref.kink_free_input(VGG19Conv54, (1, 3, 32, 32), y, uniform01, l1=True)
        zoo_ref.one_step("vgg19_conv54", VGG19Conv54, x, y, F.l1_loss,
                         dict(model="vgg19_conv54", input=name), full_max=4096)

    if wanted("gan_losses"):
        losses()
    if wanted("gan_step"):
        gan_step()


if __name__ == "__main__":
    main()
