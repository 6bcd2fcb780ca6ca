{
  "variables": {
    # CUDA toolkit root when nvcc is usable, "" otherwise (scripts/detect-cuda.mjs; DELIBERATE_NO_CUDA=1 forces "").
    "cuda_home%": "<!(node scripts/detect-cuda.mjs)",
    # Sanitizers for the CPU build, e.g. "address,undefined" (DELIBERATE_SANITIZE; scripts/build-addon.mjs builds such
    # an addon into build-asan/, never build/Release, and scripts/asan/run.sh runs the native tests on it).
    "sanitize%": "<!(node -p \"process.env.DELIBERATE_SANITIZE || ''\")",
  },
  "targets": [
    {
      "target_name": "deliberate",
      # cpp/ (shared headers, errors, knobs, storage) and its layers cpp/napi, cpp/cpu, cpp/model, like cuda/.
      "sources": ["<!@(node -e \"console.log(require('fs').readdirSync('cpp',{recursive:true}).filter(f=>f.endsWith('.cc')).sort().map(f=>'cpp/'+f).join(' '))\")"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "cpp", "cpp/napi", "cpp/cpu", "cpp/model"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions", "-O2"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-O2"],
      # x86-64-v3 baseline (AVX2/FMA/F16C); AVX-512 paths are compiled per function and chosen at run time.
      "cflags_cc": ["-std=c++17", "-O3", "-march=x86-64-v3", "-fexceptions", "-frtti", "-fno-math-errno", "-pthread"],
      "ldflags": ["-pthread"],
      "conditions": [
        # -O1 and frame pointers give exact report stacks at a modest cost (the sanitizers' own advice).
        ["sanitize!=''", {
          "cflags_cc!": ["-O3"],
          "cflags_cc": ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=<(sanitize)"],
          "ldflags": ["-fsanitize=<(sanitize)"],
        }],
        ["cuda_home!=''", {
          "defines": ["DELIBERATE_CUDA=1"],
          "dependencies": ["deliberate_sm90"],
          "include_dirs": ["<(cuda_home)/include"],
          "sources": ["<!@(node -e \"console.log(require('fs').readdirSync('cuda').filter(f=>f.endsWith('.cu')).map(f=>'cuda/'+f).join(' '))\")"],
          "libraries": ["-L<(cuda_home)/lib64", "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
          "rules": [{
            "rule_name": "nvcc",
            "extension": "cu",
            "inputs": ["<(RULE_INPUT_PATH)", "<!@(node -e \"console.log(require('fs').readdirSync('cuda').filter(f=>f.endsWith('.cuh')||f.endsWith('.h')).map(f=>'cuda/'+f).join(' '))\")", "cpp/kernels.h", "cpp/common.h", "cpp/gpu_runtime.h"],
            "outputs": ["<(INTERMEDIATE_DIR)/cuda/<(RULE_INPUT_ROOT).o"],
            "action": ["<(cuda_home)/bin/nvcc", "-c", "<(RULE_INPUT_PATH)", "-o", "<(INTERMEDIATE_DIR)/cuda/<(RULE_INPUT_ROOT).o",
                       "-std=c++17", "-O3", "-Icpp", "-Icuda", "-DDELIBERATE_CUDA=1", "--expt-relaxed-constexpr",
                       "-Xcompiler", "-fPIC", "-Xcompiler", "-fexceptions",
                       "-gencode", "arch=compute_80,code=sm_80",
                       "-gencode", "arch=compute_86,code=sm_86",
                       "-gencode", "arch=compute_89,code=sm_89",
                       "-gencode", "arch=compute_90,code=sm_90",
                       "-gencode", "arch=compute_90,code=compute_90"],
            "message": "nvcc <(RULE_INPUT_PATH)",
            "process_outputs_as_sources": 1
          }]
        }]
      ]
    }
  ],
  "conditions": [
    # The wgmma GEMM (cuda/sm90/*.cu) exists only as sm_90a code: wgmma and setmaxnreg have no other target, and
    # building it for sm_90 as well would let the loader pick an image without them. Linked into the addon above;
    # on other GPUs it reports itself unavailable and the mma.sync kernels run (cuda/gemm.cu).
    ["cuda_home!=''", {
      "targets": [{
        "target_name": "deliberate_sm90",
        "type": "static_library",
        "sources": ["<!@(node -e \"console.log(require('fs').readdirSync('cuda/sm90').filter(f=>f.endsWith('.cu')).map(f=>'cuda/sm90/'+f).join(' '))\")"],
        "rules": [{
          "rule_name": "nvcc_sm90a",
          "extension": "cu",
          "inputs": ["<(RULE_INPUT_PATH)", "<!@(node -e \"const fs=require('fs');console.log([...fs.readdirSync('cuda').filter(f=>f.endsWith('.cuh')).map(f=>'cuda/'+f),...fs.readdirSync('cuda/sm90').filter(f=>f.endsWith('.cuh')).map(f=>'cuda/sm90/'+f)].join(' '))\")", "cpp/kernels.h", "cpp/common.h", "cpp/gpu_runtime.h"],
          "outputs": ["<(INTERMEDIATE_DIR)/cuda/sm90/<(RULE_INPUT_ROOT).o"],
          "action": ["<(cuda_home)/bin/nvcc", "-c", "<(RULE_INPUT_PATH)", "-o", "<(INTERMEDIATE_DIR)/cuda/sm90/<(RULE_INPUT_ROOT).o",
                     "-std=c++17", "-O3", "-Icpp", "-Icuda", "-Icuda/sm90", "-DDELIBERATE_CUDA=1", "--expt-relaxed-constexpr",
                     "-Xcompiler", "-fPIC", "-Xcompiler", "-fexceptions",
                     "-gencode", "arch=compute_90a,code=sm_90a"],
          "message": "nvcc (sm_90a) <(RULE_INPUT_PATH)",
          "process_outputs_as_sources": 1
        }]
      }]
    }]
  ]
}
