# Wraps a PTX file into a C++ header: `static const char <NAME>[] = R"(...)";`
# Run as: cmake -DINPUT=x.ptx -DOUTPUT=x.inc -DNAME=symbol -P EmbedPtx.cmake
file(READ "${INPUT}" ptx)
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by EmbedPtx.cmake; do not edit.\n"
  "static const char ${NAME}[] = R\"tejitptx(${ptx})tejitptx\";\n")
