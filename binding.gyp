{
  "targets": [{
    "target_name": "vugpu_native",
    "sources": [ "<!@(find native/src native/kernels -name '*.cc' | sort)" ],
    "include_dirs": [ "<!(node -p \"require('node-addon-api').include_dir\")", "native/include" ],
    "defines": [ "NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_CPP_EXCEPTIONS" ],
    "cflags!": [ "-fno-exceptions" ],
    "cflags_cc!": [ "-fno-exceptions", "-std=gnu++17" ],
    "cflags_cc": [ "-O3", "-std=c++20", "-mavx2", "-mfma", "-fno-strict-aliasing" ],
    "libraries": [ "-lpthread", "-ldl", "-Wl,--exclude-libs,ALL", "/usr/lib/x86_64-linux-gnu/libSPIRV-Tools.a" ]
  }]
}
