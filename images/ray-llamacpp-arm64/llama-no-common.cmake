# Included right after llama.cpp's own project() call (CMake's CMAKE_PROJECT_<name>_INCLUDE, passed as
# -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file> in CMAKE_ARGS: tools/env.sh, this image's Dockerfile).
#
# Why: llama-cpp-python 0.3.36's CMakeLists.txt forces LLAMA_BUILD_COMMON ON (`set(... CACHE BOOL ... FORCE)`,
# for its llava/mtmd build), so -DLLAMA_BUILD_COMMON=OFF on the command line is overwritten. The package loads only
# libllama and libggml* (llama_cpp_python_install_target(...) in the same file; the wheel's llama_cpp/lib holds
# nothing else), and with LLAVA_BUILD=OFF nothing links llama-common. Compiling it (and cpp-httplib with it) was
# 164 of the build's 350 CPU-seconds on this machine (ninja's log), every fresh setup. A normal variable set here
# shadows the forced cache entry in llama.cpp's directory scope, so `if (LLAMA_BUILD_COMMON)` there (its
# add_subdirectory(common) and install(TARGETS llama-common)) sees OFF.
set(LLAMA_BUILD_COMMON OFF)
