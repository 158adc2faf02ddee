#!/bin/sh
# guest/vkapp: nothing to compile — the chroot runner and the llama runner are scripts; the
# application layer itself (loader, vulkaninfo, validation layers, Node, node-llama-cpp, models)
# is the read-only disk image scripts/setup.sh's vkapp step builds.
set -eu
cp vkapp.sh vkapp.sh.out
chmod 755 vkapp.sh.out
