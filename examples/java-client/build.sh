#!/usr/bin/env bash
# Generate the Java classes from proto/ and compile them with the example into build/classes.
# Needs protoc and protobuf-java of one release (Debian: `apt-get install protobuf-compiler
# libprotobuf-java`, which puts the jar at /usr/share/java/protobuf.jar) and a JDK (17 or newer).
set -euo pipefail
cd "$(dirname "$0")"
jar=${PROTOBUF_JAR:-/usr/share/java/protobuf.jar}
rm -rf build && mkdir -p build/gen build/classes
protoc -I ../../proto --java_out=build/gen ../../proto/warden/checkpoint/v1/checkpoint.proto
javac -d build/classes -cp "$jar" $(find build/gen src -name '*.java')
echo "built: java -cp build/classes:$jar dev.warden.examples.Check URL TOKEN AGENT TOOL [KEY=VALUE...]"
