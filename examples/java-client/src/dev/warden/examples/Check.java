package dev.warden.examples;

import com.google.protobuf.Message;
import com.google.protobuf.Parser;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import dev.warden.checkpoint.v1.CheckRequest;
import dev.warden.checkpoint.v1.CheckResponse;
import dev.warden.checkpoint.v1.ErrorDetail;
import dev.warden.checkpoint.v1.RunContext;
import dev.warden.checkpoint.v1.RunMode;
import dev.warden.checkpoint.v1.StartRunRequest;
import dev.warden.checkpoint.v1.StartRunResponse;
import dev.warden.checkpoint.v1.ToolCall;
import dev.warden.checkpoint.v1.Verdict;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Base64;

/**
 * Asks a checkpoint's HTTP door whether an agent may make one tool call: StartRun, then Check in
 * that run. The messages are the classes protoc generates from proto/ (java_package
 * dev.warden.checkpoint.v1); they travel as binary protobuf (Connect's application/proto), so the
 * client needs protobuf-java and the JDK's HTTP client, nothing more.
 *
 * <pre>java -cp build/classes:protobuf.jar dev.warden.examples.Check URL TOKEN AGENT TOOL [KEY=VALUE...]</pre>
 *
 * Prints the verdict and code; exits 0 on ALLOW, 1 on any other verdict, 2 on an error answer.
 */
public final class Check {
  private static final String SERVICE = "/warden.checkpoint.v1.CheckpointService/";

  public static void main(String[] args) throws Exception {
    if (args.length < 4) {
      System.err.println("usage: Check URL TOKEN AGENT TOOL [KEY=VALUE...]");
      System.exit(2);
    }
    String url = args[0], token = args[1], agent = args[2], tool = args[3];
    HttpClient http = HttpClient.newHttpClient();

    StartRunResponse started = call(http, url, token, "StartRun",
        StartRunRequest.newBuilder().setAgent(agent).setPerson("alice")
            .setMode(RunMode.RUN_MODE_INTERACTIVE).build(),
        StartRunResponse.parser());
    System.out.println("run " + started.getRunId() + ": " + started.getDecision().getCode());

    Struct.Builder arguments = Struct.newBuilder();
    for (int i = 4; i < args.length; i++) {
      String[] pair = args[i].split("=", 2);
      arguments.putFields(pair[0], Value.newBuilder().setStringValue(pair.length > 1 ? pair[1] : "").build());
    }
    CheckResponse answer = call(http, url, token, "Check",
        CheckRequest.newBuilder()
            .setRun(RunContext.newBuilder().setRunToken(started.getRunToken()))
            .setToolCall(ToolCall.newBuilder().setTool(tool).setArguments(arguments))
            .build(),
        CheckResponse.parser());
    System.out.println(answer.getVerdict() + " " + answer.getCode() + " " + answer.getDecisionId()
        + (answer.hasGrant() ? " grant for " + answer.getGrant().getTool() : ""));
    System.exit(answer.getVerdict() == Verdict.VERDICT_ALLOW ? 0 : 1);
  }

  /** One unary call; an error answer (a Connect error, JSON) is printed with its stable code. */
  private static <T> T call(HttpClient http, String url, String token, String method, Message request,
      Parser<T> parser) throws Exception {
    HttpRequest post = HttpRequest.newBuilder(URI.create(url + SERVICE + method))
        .header("Content-Type", "application/proto")
        .header("Authorization", "Bearer " + token)
        .POST(HttpRequest.BodyPublishers.ofByteArray(request.toByteArray()))
        .build();
    HttpResponse<byte[]> response = http.send(post, HttpResponse.BodyHandlers.ofByteArray());
    if (response.statusCode() != 200) {
      String body = new String(response.body(), java.nio.charset.StandardCharsets.UTF_8);
      System.out.println("error " + response.statusCode() + " " + stableCode(body) + ": " + body);
      System.exit(2);
    }
    return parser.parseFrom(response.body());
  }

  /** The ErrorDetail's code, read from the error's binary detail as any Connect client would. */
  private static String stableCode(String body) throws Exception {
    java.util.regex.Matcher value = java.util.regex.Pattern.compile("\"value\":\"([^\"]*)\"").matcher(body);
    if (!value.find()) {
      return "?";
    }
    return ErrorDetail.parseFrom(Base64.getDecoder().decode(value.group(1))).getCode();
  }
}
