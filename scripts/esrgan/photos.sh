#!/bin/sh
# Real photos for the ESRGAN case study (docs/esrgan.md), from Debian's
# plasma-workspace-wallpapers package (KDE's wallpapers; the photographs
# among them, 2560x1600 JPEG): installed here if missing, nothing else is
# downloaded. Writes an image folder (torchvision's layout, one class):
#
#   scripts/esrgan/photos.sh [DIR]       (default /tmp/esrgan-photos)
#
#   DIR/train/photos/*.jpg   ten photos to train on
#   DIR/test/photos/*.jpg    two held out (EveningGlow, Kite)
set -eu
dir=${1:-/tmp/esrgan-photos}
src=/usr/share/wallpapers
if [ ! -d "$src/Path" ]; then
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends plasma-workspace-wallpapers
	else
		sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends plasma-workspace-wallpapers
	fi
fi
train="Autumn BytheWater ColdRipple ColorfulCups DarkestHour FallenLeaf Grey OneStandsOut Path summer_1am"
test="EveningGlow Kite"
mkdir -p "$dir/train/photos" "$dir/test/photos"
for name in $train; do cp "$src/$name/contents/images/2560x1600.jpg" "$dir/train/photos/$name.jpg"; done
for name in $test; do cp "$src/$name/contents/images/2560x1600.jpg" "$dir/test/photos/$name.jpg"; done
echo "$dir: $(ls "$dir/train/photos" | wc -l) training photos, $(ls "$dir/test/photos" | wc -l) held out"
