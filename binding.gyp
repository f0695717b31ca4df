{
  "targets": [
    {
      "target_name": "laminar_native",
      "sources": [
        "native/addon.cc",
        "native/errors.cc",
        "native/mapping.cc",
        "native/mapping_async.cc",
        "native/segment.cc",
        "native/checksum.cc",
        "native/checksum_wide.cc",
        "native/simd_level.cc",
        "native/fp8_quantize.cc",
        "native/delta_codec.cc",
        "native/delta_codec_async.cc",
        "native/ucx_status.cc",
        "native/ucx_context.cc",
        "native/ucx_worker.cc",
        "native/ucx_listener.cc",
        "native/ucx_endpoint.cc",
        "native/ucx_memory_handle.cc",
        "native/ucx_request.cc",
        "native/ucx_binding.cc",
        "native/ucx_connections.cc",
        "native/ucx_transfer.cc",
        "native/ucx_registration.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_DISABLE_CPP_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "XXH_INLINE_ALL"
      ],
      "cflags_cc": [
        "-std=c++17", "-O3", "-fno-exceptions", "-Wall", "-Wextra", "-Wno-unused-parameter",
        "<!@(pkg-config --cflags libxxhash ucx)"
      ],
      "cflags_cc!": ["-fno-rtti"],
      "libraries": ["<!@(pkg-config --libs libxxhash ucx)"]
    }
  ]
}
